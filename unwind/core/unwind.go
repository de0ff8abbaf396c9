package core

import (
	"errors"
	"fmt"

	"github.com/unwindkit/unwindkit/fp"
	"github.com/unwindkit/unwindkit/internal/errs"
	"github.com/unwindkit/unwindkit/scs"
	"github.com/unwindkit/unwindkit/unwind"
)

// Frames unwinds thread t of the core with method (MethodAuto: the shadow
// call stack copy when the thread has one, else the frame-record walk) and
// returns its frames, innermost first. A walk that fails part-way returns
// the frames it had and the error.
//
// MethodSCS copies from x18-8 down to [Thread.SCSBase]: it lacks the
// crashing pc, a return address still in x30 (a leaf's caller), the pc a
// signal interrupted, and every frame of uninstrumented code (libc, main).
// MethodFP starts at pc and follows frame records from x29 over the
// core's writable segments, ending at a zero frame pointer as AAPCS64
// user-space chains end; it lacks a return address still in x30 and
// frames of code built without frame records.
// MethodGCS copies the thread's Guarded Control Stack from NT_ARM_GCS's
// GCSPR_EL0 up to the top marker: every return address a bl pushed
// (leaf callers, code without frame records or SCS pushes, libc) and the
// sigreturn trampoline, not the crashing pc or the pc a signal
// interrupted; it is ErrNotSupported when the core has no NT_ARM_GCS or
// the thread had not enabled its GCS.
func (c *Core) Frames(t *Thread, method unwind.Method) ([]unwind.Frame, error) {
	method = method.Resolve(t.HasSCS)
	switch method {
	case unwind.MethodSCS:
		if !t.HasSCS {
			return nil, fmt.Errorf("core: %s: thread %d: %s: %w", c.Path, t.PID, t.SCSNote, unwind.ErrNotSupported)
		}
		r, err := c.mem.ensure(t.SCSBase)
		if err != nil {
			return nil, c.walkErr(t, "shadow call stack copy: load its segment", err)
		}
		if r == nil {
			return nil, fmt.Errorf("core: %s: thread %d: shadow call stack at %#x in no writable segment the core holds: %w",
				c.Path, t.PID, t.SCSBase, ErrNotHeld)
		}
		var data []byte // the shadow stack's bytes from SCSBase on
		if t.SCSBase >= r.Base && t.SCSBase <= r.End() {
			data = r.Bytes()[t.SCSBase-r.Base:]
		}
		v := scs.NewSnapshotView(data, t.SCSBase, t.Regs.X[18], c.Layout)
		out, err := unwind.NewSCSSource(&v, unwind.SourceOptions{Symbolizer: c.sym}).AppendFrames(nil)
		if err != nil {
			return out, c.walkErr(t, "shadow call stack copy", err)
		}
		return out, nil
	case unwind.MethodFP:
		// The walk reads the segments loaded so far; when the chain
		// leads into a writable segment not loaded yet (a signal
		// stack, a coroutine stack), load it and walk again.
		for try := 0; ; try++ {
			out, n, err := c.walkFP(t)
			if addr, ok := c.mem.missing(err, n); ok && try < 16 {
				if _, lerr := c.mem.ensure(addr); lerr != nil {
					return out, c.walkErr(t, "frame-record walk: load a segment", lerr)
				}
				continue
			}
			return out, c.walkErr(t, "frame-record walk", err)
		}
	}
	if method == unwind.MethodGCS {
		return c.gcsFrames(t)
	}
	return nil, fmt.Errorf("core: %s: thread %d: unknown method %v", c.Path, t.PID, method)
}

// gcsFrames copies thread t's Guarded Control Stack: from GCSPR_EL0
// (NT_ARM_GCS) up to the top marker, over the PT_LOAD holding GCSPR_EL0
// (the GCS is one mapping; a trimmed core may hold only its part from
// GCSPR_EL0's page up). It reads only the live part, GCSPR_EL0 to the end
// of the segment's bytes: Linux sizes a GCS at half the stack limit (4 MiB
// for 8 MiB), almost all of it unused slots below the pointer.
func (c *Core) gcsFrames(t *Thread) ([]unwind.Frame, error) {
	if !t.HasGCS {
		// qemu-aarch64's cores, Linux's before 6.13 or on a CPU
		// without FEAT_GCS.
		return nil, fmt.Errorf("core: %s: thread %d: the core holds no Guarded Control Stack (no NT_ARM_GCS note): %w", c.Path, t.PID, unwind.ErrNotSupported)
	}
	if !t.GCS.Enabled() {
		return nil, fmt.Errorf("core: %s: thread %d: GCS not enabled (NT_ARM_GCS features_enabled %#x): %w",
			c.Path, t.PID, t.GCS.FeaturesEnabled, unwind.ErrNotSupported)
	}
	gcspr := t.GCS.GCSPR
	p, ok := c.f.Find(gcspr)
	if !ok || p.Flags&pfW == 0 || gcspr-p.VAddr >= p.FileSz {
		return nil, fmt.Errorf("core: %s: thread %d: NT_ARM_GCS gcspr_el0 %#x in no writable segment the core holds: %w",
			c.Path, t.PID, gcspr, ErrNotHeld)
	}
	// At most the segment's bytes in the file: bounded by the file's size.
	data := make([]byte, (p.VAddr+p.FileSz-gcspr)&^7)
	if err := c.f.ReadAt(data, gcspr); err != nil {
		return nil, c.walkErr(t, "GCS copy: read its segment", err)
	}
	out, err := unwind.NewGCSSource(data, gcspr, gcspr, unwind.SourceOptions{Symbolizer: c.sym}).AppendFrames(nil)
	if err != nil {
		return out, c.walkErr(t, "GCS copy", err)
	}
	return out, nil
}

// walkErr says where an unwind of thread t failed: the core file, the
// thread and the technique (what), and for corruption found at an
// address (an *errs.CorruptError) the segment holding that address and
// its offset in the file. It wraps err, so errors.Is finds the sentinels
// (ErrCorrupt, ErrNotHeld, ...) and errors.As the CorruptError. nil
// stays nil.
func (c *Core) walkErr(t *Thread, what string, err error) error {
	if err == nil {
		return nil
	}
	where := ""
	var ce *errs.CorruptError
	if errors.As(err, &ce) {
		where = " (address in no segment of the core)"
		if p, ok := c.f.Find(ce.Addr); ok {
			if off := ce.Addr - p.VAddr; off < p.FileSz {
				where = fmt.Sprintf(" (segment %d, file offset %#x)", p.Index, p.Off+off)
			} else {
				where = fmt.Sprintf(" (segment %d, beyond the %#x bytes the file holds of it)", p.Index, p.FileSz)
			}
		}
	}
	return fmt.Errorf("core: %s: thread %d: %s%s: %w", c.Path, t.PID, what, where, err)
}

// walkFP walks t's frame records over the segments loaded.
func (c *Core) walkFP(t *Thread) ([]unwind.Frame, int, error) {
	stacks, n := c.mem.snapshot(t.Regs.SP)
	cfg := fp.Config{
		Stacks:     stacks,
		FP:         t.Regs.X[29],
		PC:         t.Regs.PC,
		Layout:     c.Layout,
		ZeroFPEnds: true,
	}
	var out []unwind.Frame
	for f, err := range unwind.NewFPSource(&cfg, unwind.SourceOptions{Symbolizer: c.sym}).Frames() {
		if err != nil {
			return out, n, err
		}
		out = append(out, f)
	}
	return out, n, nil
}

// Compare unwinds thread t with both techniques and lines the traces up
// with unwind.CompareTraces, which explains each frame only one of them
// has. The errors of the two unwinds are in the Comparison.
func (c *Core) Compare(t *Thread) *unwind.Comparison {
	s, serr := c.Frames(t, unwind.MethodSCS)
	f, ferr := c.Frames(t, unwind.MethodFP)
	cmp := unwind.CompareTraces(c.sym, s, f)
	cmp.SCSErr, cmp.FPErr = serr, ferr
	return cmp
}

// X30Only returns the PAC-stripped x30 of thread t when it is a return
// address that neither technique reports: it differs from the first lr
// the frame-record walk found, so the crashing function had not saved it
// (a leaf, or a function stopped before its prologue). Neither technique
// reads x30, as the kernel's unwinder does not; gdb finds that caller
// through the call frame information. When x30 equals that first lr (a
// shrink-wrapped recursive function stopped before its prologue), an
// unsaved x30 cannot be told from a saved one and ok is false.
func (c *Core) X30Only(t *Thread) (pc uint64, ok bool) {
	x30 := c.Layout.Strip(t.Regs.X[30])
	if x30 == 0 {
		return 0, false
	}
	fs, _ := c.Frames(t, unwind.MethodFP)
	if len(fs) > 1 && fs[1].PC == x30 {
		return 0, false
	}
	return x30, true
}
