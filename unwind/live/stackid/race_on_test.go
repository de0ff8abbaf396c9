//go:build race

package stackid_test

const raceBuild = true
