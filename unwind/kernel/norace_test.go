//go:build !race

package kernel_test

const race = false
