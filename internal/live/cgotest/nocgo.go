//go:build !cgo

package cgotest

// Enabled reports whether Call really goes through C (cgo is enabled).
const Enabled = false

// Call calls f directly: without cgo there is no C to go through.
func Call(f func()) { f() }
