// Package snapcheck runs both unwinders on a loaded snapshot
// (internal/snapshot): the shadow-call-stack copy (package scs) from x18 down
// to scs_base, and the frame-record walk (package fp) from x29 over the
// snapshot's stack regions. Its tests check both against the known call
// chains of the real arm64 captures in testdata/arm64.
//
// Mapping: the region named "stack" is the task stack (fp.Task), every other
// region of kind "stack" (the sigaltstack) is an extra stack (fp.Extra);
// the walk is a user-space one, so a zero frame pointer ends it
// (fp.Config.ZeroFPEnds), as the AAPCS64 chain from _start ends.
package snapcheck

import (
	"github.com/unwindkit/unwindkit/fp"
	"github.com/unwindkit/unwindkit/internal/errs"
	"github.com/unwindkit/unwindkit/internal/snapshot"
	"github.com/unwindkit/unwindkit/scs"
)

// MaxFrames bounds both traces.
const MaxFrames = 4096

// SCS copies the snapshot's shadow call stack, newest entry first, each
// entry PAC-stripped with the snapshot's layout. It returns
// errs.ErrNotSupported when the snapshot has no shadow call stack.
func SCS(s *snapshot.Snapshot) ([]scs.Frame, error) {
	r := s.SCSRegion()
	if r == nil {
		return nil, errs.ErrNotSupported
	}
	v := scs.NewSnapshotView(r, s.SCSBase, s.Regs.X18, s.Layout)
	store := make([]scs.Frame, MaxFrames)
	n, err := scs.Frames(&v, store, 0)
	return store[:n], err
}

// FPConfig returns the frame-record walk configuration for s: start at pc
// and x29, every stack region accessible, PACs stripped, fp == 0 ends.
func FPConfig(s *snapshot.Snapshot) *fp.Config {
	c := &fp.Config{
		Mem:        s.Memory,
		FP:         s.Regs.X29,
		PC:         s.Regs.PC,
		Layout:     s.Layout,
		ZeroFPEnds: true,
	}
	for _, r := range s.StackRegions() {
		kind := fp.Extra
		if r.Name == "stack" {
			kind = fp.Task
		}
		c.Stacks = append(c.Stacks, fp.Stack{Kind: kind, Low: r.Base, High: r.End(), Name: r.Name})
	}
	return c
}

// FP walks the frame records of s, innermost first: the pc, then the lr of
// each record from x29 on.
func FP(s *snapshot.Snapshot) ([]fp.Frame, fp.End, error) {
	var frames []fp.Frame
	end, err := fp.Walk(FPConfig(s), func(f fp.Frame) bool {
		frames = append(frames, f)
		return len(frames) < MaxFrames
	})
	return frames, end, err
}
