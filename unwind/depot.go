package unwind

import (
	"fmt"

	"github.com/unwindkit/unwindkit/depot"
)

// SaveToDepot is the kernel's kasan_save_stack in one call: it unwinds src
// into buf (removing skip frames, as [Save]) and stores what it got in d
// (stack_depot_save), returning the trace's handle. A trace already in d
// costs no allocation.
//
// A walk that fails part-way stores the frames it had and returns their
// handle with the unwinder's error; a walk that found no frame stores
// nothing and returns the zero Handle. A full buf is not an error: the
// trace is cut at len(buf). If storing fails, the handle is zero and the
// error wraps the depot's.
func SaveToDepot(d *depot.Depot, src *Source, buf []uint64, skip int) (depot.Handle, error) {
	n, err := Save(src, buf, skip)
	return StoreTrace(d, buf[:n], err)
}

// StoreTrace stores trace, the result of an unwind that ended with err,
// in d as [SaveToDepot] does: a partial trace is stored and its handle
// returned with err; an empty one is not stored. It is for callers that
// unwind with their own consistency check (a modelled CPU's sequence
// count) before storing.
func StoreTrace(d *depot.Depot, trace []uint64, err error) (depot.Handle, error) {
	if len(trace) == 0 {
		return 0, err
	}
	h, derr := d.Save(trace)
	if derr != nil {
		return 0, fmt.Errorf("unwind: storing a %d-frame trace: %w", len(trace), derr)
	}
	return h, err
}
