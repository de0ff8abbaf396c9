//go:build !race

package kcapture_test

const race = false
