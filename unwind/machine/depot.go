package machine

import (
	"github.com/unwindkit/unwindkit/depot"
	"github.com/unwindkit/unwindkit/unwind"
)

// SaveToDepot is KASAN's kasan_save_stack on the modelled CPU: an unwinder
// inlined in the current function saves the trace into d and returns its
// handle, in one call and without allocating when the trace is already in
// d. It unwinds as [CPU.Unwind] does (Inline), so it may run on any
// goroutine and stores only a trace read from a consistent CPU state
// (ErrChanged otherwise). A walk that fails part-way stores the frames it had
// (see unwind.SaveToDepot). It stores the trace as unwind.SaveToDepot
// does: d cuts it with its Filter, if it has one, and finds a trace it
// holds by a sample of its frames and one compare (depot.Depot.Save).
func (c *CPU) SaveToDepot(d *depot.Depot, method unwind.Method, buf []uint64, opts SaveOptions) (depot.Handle, error) {
	if m := d.MaxFrames(); len(buf) > m {
		buf = buf[:m]
	}
	n, _, err := c.UnwindSeq(method, buf, opts)
	return unwind.StoreTrace(d, buf[:n], err)
}
