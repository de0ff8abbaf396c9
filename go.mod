module github.com/unwindkit/unwindkit

go 1.26.0

require (
	golang.org/x/arch v0.33.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
)
