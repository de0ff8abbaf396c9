package fp

import (
	"github.com/unwindkit/unwindkit/internal/errs"
)

// retLoad reads the word at addr of the return stack at a whose caller
// memory is data (Config.GraphStackData or KretprobeStackData).
func (u *Unwinder) retLoad(a uint64, data []byte, addr uint64) (uint64, bool) {
	off := addr - a // addr >= a for every caller
	if addr%8 != 0 || addr < a || off > uint64(len(data)) || uint64(len(data))-off < 8 {
		return 0, false
	}
	return loadLE(data, off), true
}

// retStack reads the header of the return stack at a: the entry count n,
// checked against the memory holding it so that a corrupt count cannot
// make a search run past that memory (or for 2^64 steps).
func (u *Unwinder) retStack(a uint64, data []byte, rule string) (n int, st status) {
	cnt, ok := u.retLoad(a, data, a)
	if !ok {
		return 0, u.fail(errs.Corruptf(rule, a, "return stack header unreadable"))
	}
	// The header was readable, so at least 8 bytes follow a.
	avail := uint64(len(data))
	if limit := (avail - RetStackEntriesOff) / RetStackEntrySize; cnt > limit {
		return 0, u.fail(errs.Corruptf(rule, a, "return stack count %d exceeds the %d entries its memory can hold", cnt, limit))
	}
	return int(cnt), stepOK
}

// retEntry reads entry i {ret, fp} of the return stack at a; retStack has
// checked that it is in memory.
func (u *Unwinder) retEntry(a uint64, data []byte, i int) (ret, fp uint64) {
	e := a + RetStackEntriesOff + RetStackEntrySize*uint64(i)
	ret, _ = u.retLoad(a, data, e)
	fp, _ = u.retLoad(a, data, e+8)
	return ret, fp
}

// graphRetAddr finds the real return address for a function-graph
// trampoline lr whose record held fp == u.fp (ftrace_graph_ret_addr). The
// search runs from the cursor (initially the newest entry) outward and
// skips entries whose ret is itself the trampoline (tail calls leave
// those). A match moves the cursor past the matched entry, so each entry
// is used at most once.
//
// The kernel's cursor uses 0 for "start from the newest", so after
// matching the oldest entry it would restart at the top; here the cursor
// simply has nothing left, which differs only for corrupt stacks (fp
// strictly increases, so a used entry cannot match again).
func (u *Unwinder) graphRetAddr() (uint64, status) {
	a, data := u.cfg.GraphStack, u.cfg.GraphStackData
	if u.graphIdx < 0 {
		n, st := u.retStack(a, data, RuleUnrecoverableGraphReturn)
		if st != stepOK {
			return 0, st
		}
		u.graphIdx, u.graphN = n, n
	}
	for i := u.graphIdx - 1; i >= 0; i-- {
		ret, fp := u.retEntry(a, data, i)
		if fp == u.fp && ret != u.cfg.GraphTrampoline {
			u.graphIdx = i
			return ret, stepOK
		}
	}
	return 0, u.fail(errs.Corruptf(RuleUnrecoverableGraphReturn, u.fp,
		"no graph return stack entry for fp %#x below index %d of %d", u.fp, u.graphIdx, u.graphN))
}

// kretprobeRetAddr finds the real return address for a kretprobe
// trampoline lr (kretprobe_find_ret_addr): from the cursor outward, skip
// instances whose ret is the trampoline, and take the first whose fp
// matches. Unlike the graph search, every instance examined moves the
// cursor, as the kernel's kr_cur does.
func (u *Unwinder) kretprobeRetAddr() (uint64, status) {
	a, data := u.cfg.KretprobeStack, u.cfg.KretprobeStackData
	if a == 0 {
		return 0, u.fail(errs.Corruptf(RuleUnrecoverableKretprobeReturn, u.fp, "task has no kretprobe instances"))
	}
	if u.krNext == -2 {
		n, st := u.retStack(a, data, RuleUnrecoverableKretprobeReturn)
		if st != stepOK {
			return 0, st
		}
		u.krNext = n - 1
	}
	for u.krNext >= 0 {
		ret, fp := u.retEntry(a, data, u.krNext)
		u.krNext--
		if ret == u.cfg.KretprobeTrampoline {
			continue
		}
		if fp == u.fp {
			return ret, stepOK
		}
	}
	return 0, u.fail(errs.Corruptf(RuleUnrecoverableKretprobeReturn, u.fp, "no kretprobe instance for fp %#x", u.fp))
}
