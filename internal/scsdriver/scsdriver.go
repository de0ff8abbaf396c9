// Package scsdriver is the bridge through which the machine model
// (package unwind/machine) drives an scs.Model's per-CPU sequence lock and
// nesting rules. Those hooks keep the machine's own state and the model's
// one change under one count (see "One nesting state and one sequence
// lock per CPU" in package scs); only the machine needs them, so they are
// not part of package scs's API.
//
// This package cannot name scs's types (scs imports it), so a model is an
// any and a context its uint8 value; package scs fills in [Of].
package scsdriver

// Driver is an scs.Model seen by its driver.
type Driver interface {
	// Begin opens one change of cpu's state for readers, spanning any
	// number of the model's calls. Begin and End nest, and only cpu's
	// driver calls them; End closes the innermost Begin. An out-of-range
	// cpu is ignored.
	Begin(cpu int)
	// End closes the change Begin opened.
	End(cpu int)
	// Seq returns cpu's sequence count (0 if cpu is out of range): odd
	// while a change is in progress, advanced by two by each change.
	Seq(cpu int) uint64
	// CheckEnter returns nil if cpu may enter context c (an scs.Context)
	// now, or an error wrapping scs.ErrNesting that says why not.
	CheckEnter(cpu int, c uint8) error
	// CheckExit returns nil if c is cpu's innermost context and not the
	// task, or an error wrapping scs.ErrNesting.
	CheckExit(cpu int, c uint8) error
}

// Of returns the Driver of model, an *scs.Model. Package scs sets it
// when it is initialized, so it is set wherever an scs.Model exists.
var Of func(model any) Driver
