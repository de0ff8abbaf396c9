package fp

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/unwindkit/unwindkit/internal/errs"
	"github.com/unwindkit/unwindkit/ptrauth"
)

// stackInfo is one accessible stack during a walk (struct stack_info plus
// what the model needs).
type stackInfo struct {
	low, high uint64 // accessible part; low == 0: inaccessible (left or never there)
	base, top uint64 // the stack as configured, for error messages
	// words is the stack's memory, exactly [base, top), once the walk
	// has looked inside it: the model's words, or a view of the caller's
	// Stack.Data (see wordsOf).
	words []uint64
	kind  StackKind
	idx   int32 // index in Config.Stacks
}

// onStack reports whether the size bytes at sp lie inside s
// (stackinfo_on_stack). It never computes an overflowing sp+size.
func (s *stackInfo) onStack(sp, size uint64) bool {
	return s.low != 0 && sp >= s.low && sp+size >= sp && sp+size <= s.high
}

// load reads the word at addr, which onStack has placed inside s. The words
// slice covers exactly [base, top): a read outside the stack is impossible
// (Go's bounds check would catch a bug here, and the fuzz test would see
// it as a panic).
func (s *stackInfo) load(addr uint64) uint64 {
	return atomic.LoadUint64(&s.words[(addr-s.base)/8])
}

// status is the result of one step.
type status uint8

const (
	stepOK status = iota
	stepFinal
	stepZeroFP
	stepFail
)

// Unwinder is the state of one walk (struct kunwind_state): the current fp
// and pc, the current stack, the accessible stacks, and the return-stack
// cursors. Use it directly to drive a walk step by step:
//
//	var u fp.Unwinder
//	u.Init(cfg)
//	for u.Next() {
//		f := u.Frame()
//		...
//	}
//	end, err := u.End(), u.Err()
//
// The zero Unwinder is not ready; call Init. An Unwinder is not safe for
// concurrent use.
type Unwinder struct {
	cfg    Config // a copy: keeping the caller's pointer would make every Config escape to the heap
	inited bool
	holes  bool // some stack has Holes: save's fast path is off on those
	layout ptrauth.Layout

	// common unwind state
	fp, pc uint64
	raw    uint64
	origin Origin
	flags  Flags
	kind   StackKind // stack the current pc was read from
	regs   uint64    // the pt_regs last crossed (state->regs), for messages

	// cur is state->stack: the stack of the last consumed object, with its
	// low bound just past that object.
	cur stackInfo
	// The accessible stacks: buf[:nbuf], or extra when there are more
	// than fit in buf. (Never a slice of buf kept in u: that would make
	// every Unwinder escape to the heap.)
	buf   [6]stackInfo
	nbuf  int
	extra []stackInfo

	// graphIdx is the function-graph cursor (graph_idx): entries
	// [0, graphIdx) remain to be searched. -1: not read yet.
	graphIdx int
	graphN   int
	// krNext is the kretprobe cursor (kr_cur): the next instance to
	// examine, counting down from the newest. -2: not read yet.
	krNext int

	started bool
	end     End
	err     error
}

// Init prepares u for a walk of c, which must not change until the walk
// ends. A bad Config (nil, a stack without the right Data, overlapping or
// misaligned stacks, an invalid Start) is reported by the first Next
// returning false and Err.
func (u *Unwinder) Init(c *Config) {
	if c == nil {
		*u = Unwinder{}
		u.setErr(fmt.Errorf("fp: nil Config"))
		return
	}
	*u = Unwinder{}
	u.init(c)
}

// init is Init for a zero u.
func (u *Unwinder) init(c *Config) {
	u.cfg, u.layout, u.inited = *c, c.Layout, true
	u.graphIdx, u.krNext = -1, -2
	u.fp, u.pc = c.FP, c.PC
	if u.cfg.ABI == ABIUnknown {
		u.cfg.ABI = ABIMetaRecord // the default, as a zero Start is OriginCaller
	}
	if u.cfg.ABI != ABIMetaRecord || c.PtRegs != (PtRegsLayout{}) {
		if err := u.cfg.checkABI(); err != nil {
			u.setErr(err)
			return
		}
	}
	switch u.origin = c.Start; u.origin {
	case OriginUnknown:
		u.origin = OriginCaller
	case OriginCaller, OriginTask, OriginRegsPC:
	default:
		u.setErr(fmt.Errorf("fp: Config.Start %v is not a start origin (want caller, task or regs-pc)", c.Start))
		return
	}
	if len(c.Stacks) > len(u.buf) {
		u.extra = make([]stackInfo, 0, len(c.Stacks))
	}
	for i := range c.Stacks {
		s := &c.Stacks[i]
		if s.Low == 0 {
			continue // stackinfo_get_unknown(): not accessible
		}
		if s.Low%8 != 0 || s.High%8 != 0 || s.High <= s.Low {
			u.setErr(fmt.Errorf("fp: stack %d %q: [%#x, %#x) is empty or not 8-byte aligned", i, s.Name, s.Low, s.High))
			return
		}
		if s.Data == nil {
			u.setErr(fmt.Errorf("fp: stack %d %q [%#x, %#x) has no Data", i, s.Name, s.Low, s.High))
			return
		}
		if s.Data != nil && uint64(len(s.Data)) != s.High-s.Low {
			u.setErr(fmt.Errorf("fp: stack %d %q [%#x, %#x): Data holds %#x bytes, want %#x", i, s.Name, s.Low, s.High, len(s.Data), s.High-s.Low))
			return
		}
		for _, h := range s.Holes {
			if h.Low >= h.High || h.Low < s.Low || h.High > s.High {
				u.setErr(fmt.Errorf("fp: stack %d %q [%#x, %#x): hole [%#x, %#x) is empty or outside it", i, s.Name, s.Low, s.High, h.Low, h.High))
				return
			}
			u.holes = true
		}
		stacks := u.list()
		for j := range stacks {
			o := &stacks[j]
			if s.Low < o.top && o.base < s.High {
				u.setErr(fmt.Errorf("fp: stack %d %q [%#x, %#x) overlaps stack %d %q", i, s.Name, s.Low, s.High, o.idx, c.Stacks[o.idx].Name))
				return
			}
		}
		si := stackInfo{low: s.Low, high: s.High, base: s.Low, top: s.High, kind: s.Kind, idx: int32(i)}
		if u.extra != nil {
			u.extra = append(u.extra, si)
		} else {
			u.buf[u.nbuf] = si
			u.nbuf++
		}
	}
}

// list returns the accessible stacks.
func (u *Unwinder) list() []stackInfo {
	if u.extra != nil {
		return u.extra
	}
	return u.buf[:u.nbuf]
}

func (u *Unwinder) setErr(err error) {
	u.err = err
	u.end = EndError
	u.started = true
}

func (u *Unwinder) fail(err error) status {
	u.err = err
	return stepFail
}

// resolve binds s to its Data, the first time the walk looks inside s.
// Doing it lazily keeps Init cheap for stacks never visited.
func (u *Unwinder) resolve(s *stackInfo) bool {
	s.words = wordsOf(u.cfg.Stacks[s.idx].Data) // init checked len(Data) == top-base
	return true
}

// findStack returns the accessible stack that wholly contains the size
// bytes at sp (unwind_find_stack): the current stack first, then the
// others not yet left. nil if there is none (or, with u.err set, if the
// stack is not backed by memory).
func (u *Unwinder) findStack(sp, size uint64) *stackInfo {
	if u.cur.onStack(sp, size) {
		return &u.cur
	}
	stacks := u.list()
	for i := range stacks {
		s := &stacks[i]
		if s.onStack(sp, size) {
			if s.words == nil && !u.resolve(s) {
				return nil
			}
			return s
		}
	}
	return nil
}

// consumeStack records that the object [sp, sp+size) on s has been read
// (unwind_consume_stack).
func (u *Unwinder) consumeStack(s *stackInfo, sp, size uint64) {
	if s != &u.cur {
		// Rule: stack transitions are one-way. The stack being entered
		// is removed from the accessible list (its low becomes 0), and
		// the stack being left was removed when it was entered, so a
		// stack left behind can never be found again.
		u.cur = *s
		s.low, s.high = 0, 0
	}
	// Rule: within a stack the low bound moves past each consumed object,
	// so the next object on this stack must be at a strictly higher
	// address: loops and backward steps fail in findStack.
	u.cur.low = sp + size
}

// stackName names the stack s for an error message.
func (u *Unwinder) stackName(s *stackInfo) string {
	st := &u.cfg.Stacks[s.idx]
	if st.Name != "" {
		return st.Name
	}
	return st.Kind.String()
}

// outside explains why no accessible stack holds the size bytes of the
// object what at sp. Called only on failure.
func (u *Unwinder) outside(rule, what string, sp, size uint64) error {
	if u.err != nil { // the stack exists but is not in memory
		return u.err
	}
	if u.cur.low != 0 && sp >= u.cur.base && sp < u.cur.top {
		if sp < u.cur.low {
			return errs.Corruptf(RuleFPNotIncreasing, sp, "%s at %#x is below %#x, the end of the last object consumed on stack %q",
				what, sp, u.cur.low, u.stackName(&u.cur))
		}
		return errs.Corruptf(RuleObjectCrossesStackEnd, sp, "%d-byte %s at %#x does not fit below %#x, the top of stack %q",
			size, what, sp, u.cur.top, u.stackName(&u.cur))
	}
	stacks := u.list()
	for i := range stacks {
		s := &stacks[i]
		if sp < s.base || sp >= s.top {
			continue
		}
		if s.low == 0 {
			return errs.Corruptf(RuleStackReentered, sp, "%s at %#x is on stack %q, which the walk has left", what, sp, u.stackName(s))
		}
		return errs.Corruptf(RuleObjectCrossesStackEnd, sp, "%d-byte %s at %#x does not fit below %#x, the top of stack %q",
			size, what, sp, s.top, u.stackName(s))
	}
	return errs.Corruptf(rule, sp, "%s at %#x is in no accessible stack", what, sp)
}

// missing fails the step when the n bytes at a, which it is about to read
// from s, overlap one of s's Holes: the error names the bytes and wraps
// the hole's Err.
//
//go:noinline
func (u *Unwinder) missing(s *stackInfo, a, n uint64) status {
	for _, h := range u.cfg.Stacks[s.idx].Holes {
		if a < h.High && a+n > h.Low {
			err := h.Err
			if err == nil {
				err = errNotHeld
			}
			return u.fail(fmt.Errorf("fp: %d bytes at %#x on stack %q: %w", n, a, u.stackName(s), err))
		}
	}
	return stepOK
}

// errNotHeld is the error of a Hole without one.
var errNotHeld = errors.New("not held by the caller")

// nextFrameRecord steps from the frame record at fp to its caller
// (kunwind_next_frame_record).
func (u *Unwinder) nextFrameRecord() status {
	fp := u.fp
	// Rule: fp is 8-byte aligned.
	if fp&7 != 0 {
		return u.fail(errs.Corrupt(RuleMisalignedFP, fp))
	}
	// Rule: the 16-byte record lies inside an accessible stack, above
	// everything already consumed on it.
	s := u.findStack(fp, FrameRecordSize)
	if s == nil {
		if fp == 0 && u.cfg.ZeroFPEnds && u.err == nil {
			return stepZeroFP
		}
		return u.fail(u.outside(RuleFPOutsideStacks, "frame record", fp, FrameRecordSize))
	}
	if u.holes {
		if st := u.missing(s, fp, FrameRecordSize); st != stepOK {
			return st
		}
	}
	newFP := s.load(fp)
	newPC := s.load(fp + 8)
	// Before 6.13 there are no meta records: {0, 0} is an ordinary
	// record (see nextFinalABI).
	if newFP == 0 && newPC == 0 && u.cfg.ABI == ABIMetaRecord {
		return u.nextFrameRecordMeta()
	}
	u.origin = OriginFrame
	u.consumeStack(s, fp, FrameRecordSize)
	u.fp, u.pc = newFP, newPC
	u.kind = s.kind
	return stepOK
}

// nextFrameRecordMeta handles a {0, 0} record: the head of a meta record
// (kunwind_next_frame_record_meta).
func (u *Unwinder) nextFrameRecordMeta() status {
	fp := u.fp
	// Rule: the whole 24-byte meta record lies inside an accessible stack.
	s := u.findStack(fp, MetaRecordSize)
	if s == nil {
		return u.fail(u.outside(RuleMetaRecordOutsideStacks, "meta record", fp, MetaRecordSize))
	}
	if u.holes {
		if st := u.missing(s, fp+MetaTypeOff, 8); st != stepOK {
			return st
		}
	}
	switch typ := s.load(fp + MetaTypeOff); typ {
	case MetaFinal:
		// Rule: FINAL ends the walk successfully only where the task's
		// pt_regs keep their stackframe; anywhere else it is corruption.
		if t := u.cfg.TaskPtRegs; t != 0 && fp == t+u.ptRegs().StackFrame {
			return stepFinal
		}
		return u.fail(errs.Corruptf(RuleFinalNotAtTaskPtRegs, fp, "task pt_regs stackframe is at %#x", u.cfg.TaskPtRegs+u.ptRegs().StackFrame))
	case MetaPtRegs:
		return u.nextRegsPC()
	default:
		// Rule: every other type (including MetaNone) is corruption.
		return u.fail(errs.Corruptf(RuleBadMetaType, fp, "type %#x", typ))
	}
}

// nextRegsPC crosses an exception boundary: it consumes the pt_regs that
// embed the meta record at fp and continues from the interrupted context
// (kunwind_next_regs_pc).
func (u *Unwinder) nextRegsPC() status {
	fp, l := u.fp, u.ptRegs()
	// The pt_regs start l.StackFrame below the meta record; an fp too
	// small to have them is outside every stack (no wrap-around).
	if fp < l.StackFrame {
		return u.fail(errs.Corruptf(RulePtRegsOutsideStacks, fp, "meta record at %#x has no room for pt_regs below it", fp))
	}
	regs := fp - l.StackFrame
	// Rule: the whole pt_regs lie inside an accessible stack, above
	// everything already consumed on it.
	s := u.findStack(regs, l.Size)
	if s == nil {
		return u.fail(u.outside(RulePtRegsOutsideStacks, "pt_regs", regs, l.Size))
	}
	if u.holes {
		if st := u.missing(s, regs+l.PC, 8); st != stepOK {
			return st
		}
		if st := u.missing(s, regs+l.X29, 8); st != stepOK {
			return st
		}
	}
	pc := s.load(regs + l.PC)
	x29 := s.load(regs + l.X29)
	u.consumeStack(s, regs, l.Size)
	u.regs = regs
	u.fp, u.pc = x29, pc
	u.origin = OriginRegsPC
	u.kind = s.kind
	return stepOK
}

// recoverReturnAddress undoes return-address rewriting
// (kunwind_recover_return_address): the function-graph tracer first, then
// kretprobes, as the kernel orders them.
func (u *Unwinder) recoverReturnAddress() status {
	if c := &u.cfg; c.GraphTrampoline != 0 && u.pc == c.GraphTrampoline {
		if c.GraphStack != 0 {
			pc, st := u.graphRetAddr()
			if st != stepOK {
				return st
			}
			u.pc = pc
			u.flags |= FlagGraph
		} else if c.Reliable {
			// The kernel leaves the trampoline in place when the task
			// has no ret_stack; a reliable trace cannot contain it.
			return u.fail(unreliable(u.fp, "unrecovered graph trampoline %#x", u.pc))
		}
	}
	if c := &u.cfg; c.KretprobeTrampoline != 0 && u.pc == c.KretprobeTrampoline {
		pc, st := u.kretprobeRetAddr()
		if st != stepOK {
			return st
		}
		u.pc = pc
		u.flags |= FlagKretprobe
	}
	return stepOK
}

// next is one unwind step (kunwind_next): the next record, then PAC strip,
// then return-address recovery.
func (u *Unwinder) next() status {
	u.flags = 0
	if u.cfg.ABI != ABIMetaRecord { // init allows only ABIFinalRecord besides
		if st := u.nextFinalABI(); st != stepOK {
			return st
		}
	} else if st := u.nextFrameRecord(); st != stepOK {
		return st
	}
	if u.origin == OriginRegsPC && u.cfg.Reliable {
		// arch_stack_walk_reliable: the saved pc is reliable, but whether
		// the lr was live when the exception was taken is not known, so
		// the whole trace is unreliable from here.
		return u.fail(unreliable(u.regs, "exception boundary (pt_regs pc %#x)", u.pc))
	}
	u.raw = u.pc
	u.pc = u.layout.Strip(u.pc)
	return u.recoverReturnAddress()
}

// first prepares the first frame (do_kunwind's initial recovery). Unlike
// the kernel, which starts from an already-stripped
// __builtin_return_address, the start PC is stripped too: a model's start
// PC may be a signed lr, and stripping an unsigned address is the identity.
func (u *Unwinder) first() status {
	u.started = true
	if u.cfg.Reliable && u.origin == OriginRegsPC {
		return u.fail(unreliable(u.fp, "walk starts from pt_regs"))
	}
	u.raw = u.pc
	u.pc = u.layout.Strip(u.pc)
	return u.recoverReturnAddress()
}

// finish turns a step status into the walk's end.
func (u *Unwinder) finish(st status) {
	switch st {
	case stepFinal:
		u.end = EndFinal
	case stepZeroFP:
		if u.cfg.Reliable {
			u.err = unreliable(0, "chain ends at fp 0, not at FINAL")
			u.end = EndError
			return
		}
		u.end = EndZeroFP
	default:
		u.end = EndError
	}
}

// Next advances to the next frame and reports whether there is one. After
// it returns false, End and Err say how the walk ended.
func (u *Unwinder) Next() bool {
	if u.end != EndNone {
		return false
	}
	if !u.inited {
		u.setErr(fmt.Errorf("fp: Unwinder used without Init"))
		return false
	}
	var st status
	if !u.started {
		st = u.first()
		// The first frame's stack is the one holding the start fp, if
		// any (Save does not need it).
		stacks := u.list()
		for i := range stacks {
			if stacks[i].onStack(u.fp, FrameRecordSize) {
				u.kind = stacks[i].kind
				break
			}
		}
	} else {
		st = u.next()
	}
	if st != stepOK {
		u.finish(st)
		return false
	}
	return true
}

// Frame returns the current frame (valid after Next returned true).
func (u *Unwinder) Frame() Frame {
	return Frame{PC: u.pc, Raw: u.raw, FP: u.fp, Origin: u.origin, Stack: u.kind, Flags: u.flags}
}

// Stop ends the walk early, as a consumer returning false does: End
// becomes EndStopped unless the walk had already ended. In reliable mode
// a stopped walk is unreliable (arch_stack_walk_reliable fails when its
// consumer returns false), so Err then wraps [ErrUnreliable].
func (u *Unwinder) Stop() {
	if u.end == EndNone {
		u.end = EndStopped
		if u.cfg.Reliable {
			u.err = unreliable(u.fp, "consumer stopped the walk")
		}
	}
}

// End returns how the walk ended, EndNone while it is still going.
func (u *Unwinder) End() End { return u.end }

// Err returns the error that ended the walk, or nil. It wraps [ErrCorrupt]
// (as a *[CorruptError]) for corrupt stacks, [ErrUnreliable] for a
// reliable walk that met something unreliable or was stopped, and is a
// plain error for a bad Config. In reliable mode Err is nil only when End
// is [EndFinal].
func (u *Unwinder) Err() error { return u.err }
