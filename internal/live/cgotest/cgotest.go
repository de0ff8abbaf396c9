//go:build cgo

// Package cgotest runs a Go function inside a real Go -> C -> Go callback,
// for the tests of the live unwinder's cgo boundary. It is test-only: cgo
// cannot be used in _test.go files.
package cgotest

/*
void cgotestCall(int n);
*/
import "C"

// Enabled reports whether Call really goes through C (cgo is enabled).
const Enabled = true

var fn func()

// Call calls f from C: Go calls the C function cgotestCall, which calls the
// exported Go function cgotestCallback, which calls f. Calls must not
// overlap.
func Call(f func()) {
	fn = f
	C.cgotestCall(3)
	fn = nil
}

//export cgotestCallback
func cgotestCallback() { fn() }
