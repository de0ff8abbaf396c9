package fp

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// taskChain builds a task stack with depth calls (pc(1) outermost) and
// returns the machine, the stack and the expected PCs of a walk starting at
// pc(0): pc(0), pc(depth), ..., pc(1).
func taskChain(t testing.TB, depth int) (*machine, *tstack, []uint64) {
	m := newMachine(t)
	s := m.taskStack("task", stackTop, TaskStackSize)
	for i := 1; i <= depth; i++ {
		s.call(pc(i))
	}
	want := []uint64{pc(0)}
	for i := depth; i >= 1; i-- {
		want = append(want, pc(i))
	}
	return m, s, want
}

func wantCorrupt(t *testing.T, err error, rule string, addr uint64) {
	t.Helper()
	var ce *CorruptError
	if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) {
		t.Fatalf("err = %v, want a CorruptError %q", err, rule)
	}
	if ce.Rule != rule || ce.Addr != addr {
		t.Fatalf("err = %v, want rule %q at %#x", err, rule, addr)
	}
}

func TestTaskChain(t *testing.T) {
	for _, depth := range []int{0, 1, 2, 5, 40} {
		m, s, want := taskChain(t, depth)
		frames, end, err := walkAll(t, m.config(s, pc(0)))
		if err != nil || end != EndFinal {
			t.Fatalf("depth %d: end %v err %v", depth, end, err)
		}
		if got := pcs(frames); !slices.Equal(got, want) {
			t.Fatalf("depth %d: pcs %x, want %x", depth, got, want)
		}
		for i, f := range frames {
			wantOrigin := OriginFrame
			if i == 0 {
				wantOrigin = OriginCaller
			}
			if f.Origin != wantOrigin || f.Stack != Task || f.Raw != f.PC || f.Flags != 0 {
				t.Fatalf("depth %d frame %d: %+v", depth, i, f)
			}
		}
		if last := frames[len(frames)-1]; last.FP != s.regs+PtRegsStackFrameOff {
			t.Fatalf("last frame fp %#x, want the FINAL record %#x", last.FP, s.regs+PtRegsStackFrameOff)
		}
	}
}

func TestBlockedTaskStart(t *testing.T) {
	m, s, want := taskChain(t, 3)
	c := m.config(s, pc(0))
	c.Start = OriginTask
	frames, end, err := walkAll(t, c)
	if err != nil || end != EndFinal || !slices.Equal(pcs(frames), want) {
		t.Fatalf("end %v err %v pcs %x", end, err, pcs(frames))
	}
	if frames[0].Origin != OriginTask || frames[1].Origin != OriginFrame {
		t.Fatalf("origins %v %v", frames[0].Origin, frames[1].Origin)
	}
}

// Each termination and safety rule, with a positive case (the walk
// completes) and a negative one (the frames before the fault plus a
// CorruptError naming the rule and the address).
func TestRules(t *testing.T) {
	type result struct {
		pcs  []uint64
		end  End
		rule string // "" for success
		addr uint64
	}
	tests := []struct {
		name  string
		build func(t *testing.T) (*Config, result)
	}{
		{"aligned fp 8 mod 16", func(t *testing.T) (*Config, result) {
			// The kernel only requires 8-byte alignment.
			m := newMachine(t)
			s := m.taskStack("task", stackTop, TaskStackSize)
			s.call(pc(1))
			s.sp -= 8
			s.call(pc(2))
			if s.fp%16 != 8 {
				t.Fatalf("fp %#x not 8 mod 16", s.fp)
			}
			return m.config(s, pc(0)), result{pcs: []uint64{pc(0), pc(2), pc(1)}, end: EndFinal}
		}},
		{"misaligned fp", func(t *testing.T) (*Config, result) {
			m := newMachine(t)
			s := m.taskStack("task", stackTop, TaskStackSize)
			r1 := s.call(pc(1))
			r2 := s.call(pc(2))
			s.store(r2, r1+4)
			return m.config(s, pc(0)), result{pcs: []uint64{pc(0), pc(2)}, end: EndError, rule: "misaligned fp", addr: r1 + 4}
		}},
		{"misaligned start fp", func(t *testing.T) (*Config, result) {
			m := newMachine(t)
			s := m.taskStack("task", stackTop, TaskStackSize)
			s.call(pc(1))
			c := m.config(s, pc(0))
			c.FP |= 2
			return c, result{pcs: []uint64{pc(0)}, end: EndError, rule: "misaligned fp", addr: c.FP}
		}},
		{"record at stack bottom", func(t *testing.T) (*Config, result) {
			// The lowest 16 bytes of a stack hold a valid record.
			m := newMachine(t)
			s := m.taskStack("task", stackTop, TaskStackSize)
			s.call(pc(1))
			s.sp = s.s.Low + 32
			s.call(pc(2))
			if s.fp != s.s.Low {
				t.Fatalf("record at %#x, want the stack bottom", s.fp)
			}
			return m.config(s, pc(0)), result{pcs: []uint64{pc(0), pc(2), pc(1)}, end: EndFinal}
		}},
		{"fp outside stacks", func(t *testing.T) (*Config, result) {
			m := newMachine(t)
			s := m.taskStack("task", stackTop, TaskStackSize)
			r1 := s.call(pc(1))
			s.store(r1, 0x1000) // not in any stack
			s.call(pc(2))
			return m.config(s, pc(0)), result{pcs: []uint64{pc(0), pc(2), pc(1)}, end: EndError, rule: "fp outside stacks", addr: 0x1000}
		}},
		{"fp zero in kernel", func(t *testing.T) (*Config, result) {
			m := newMachine(t)
			s := m.taskStack("task", stackTop, TaskStackSize)
			r1 := s.call(pc(1))
			s.store(r1, 0) // an old-style {0, lr} final record
			return m.config(s, pc(0)), result{pcs: []uint64{pc(0), pc(1)}, end: EndError, rule: "fp outside stacks", addr: 0}
		}},
		{"record crosses stack end", func(t *testing.T) (*Config, result) {
			m := newMachine(t)
			irq := m.stack(IRQ, "irq", stackTop+0x100000, IRQStackSize)
			irq.sp -= 64
			irq.fp = irq.s.High - 8 // record would end 8 bytes past the top
			irq.call(pc(1))
			c := m.config(irq, pc(0))
			return c, result{pcs: []uint64{pc(0), pc(1)}, end: EndError, rule: "object crosses stack end", addr: irq.s.High - 8}
		}},
		{"loop to itself", func(t *testing.T) (*Config, result) {
			m := newMachine(t)
			s := m.taskStack("task", stackTop, TaskStackSize)
			r1 := s.call(pc(1))
			s.store(r1, r1)
			return m.config(s, pc(0)), result{pcs: []uint64{pc(0), pc(1)}, end: EndError, rule: "fp not increasing", addr: r1}
		}},
		{"backward step", func(t *testing.T) (*Config, result) {
			m := newMachine(t)
			s := m.taskStack("task", stackTop, TaskStackSize)
			s.call(pc(1))
			r2 := s.call(pc(2))
			r3 := s.call(pc(3))
			s.store(r2, r3-64) // points below the innermost record
			return m.config(s, pc(0)), result{pcs: []uint64{pc(0), pc(3), pc(2)}, end: EndError, rule: "fp not increasing", addr: r3 - 64}
		}},
		{"two-record cycle", func(t *testing.T) (*Config, result) {
			m := newMachine(t)
			s := m.taskStack("task", stackTop, TaskStackSize)
			r1 := s.call(pc(1))
			r2 := s.call(pc(2))
			s.store(r1, r2)
			return m.config(s, pc(0)), result{pcs: []uint64{pc(0), pc(2), pc(1)}, end: EndError, rule: "fp not increasing", addr: r2}
		}},
		{"stack transition", func(t *testing.T) (*Config, result) {
			m := newMachine(t)
			task := m.taskStack("task", stackTop, TaskStackSize)
			task.call(pc(1))
			irq := m.stack(IRQ, "irq", stackTop+0x100000, IRQStackSize)
			irq.enterFrom(task, pc(2))
			return m.config(irq, pc(0)), result{pcs: []uint64{pc(0), pc(2), pc(1)}, end: EndFinal}
		}},
		{"cross-stack cycle", func(t *testing.T) (*Config, result) {
			// irq -> task -> back into irq (above the consumed part).
			m := newMachine(t)
			task := m.taskStack("task", stackTop, TaskStackSize)
			r1 := task.call(pc(1))
			irq := m.stack(IRQ, "irq", stackTop+0x100000, IRQStackSize)
			irq.call(pc(9)) // an outer irq record the cycle returns to
			outer := irq.fp
			irq.enterFrom(task, pc(2))
			task.store(r1, outer)
			return m.config(irq, pc(0)), result{pcs: []uint64{pc(0), pc(2), pc(1)}, end: EndError, rule: "stack re-entered", addr: outer}
		}},
		{"stack not accessible", func(t *testing.T) (*Config, result) {
			m := newMachine(t)
			task := m.taskStack("task", stackTop, TaskStackSize)
			task.call(pc(1))
			irq := m.stack(IRQ, "irq", stackTop+0x100000, IRQStackSize)
			r := irq.enterFrom(task, pc(2))
			irq.call(pc(3))
			c := m.config(irq, pc(0))
			c.Stacks[1] = Stack{Kind: IRQ} // stackinfo_get_unknown(): preemptible
			return c, result{pcs: []uint64{pc(0)}, end: EndError, rule: "fp outside stacks", addr: r - 32}
		}},
		{"final not at task pt_regs", func(t *testing.T) (*Config, result) {
			m := newMachine(t)
			s := m.taskStack("task", stackTop, TaskStackSize)
			s.call(pc(1))
			s.sp -= 32
			fake := s.sp
			s.store(fake+MetaTypeOff, MetaFinal)
			s.fp = fake
			s.call(pc(2))
			return m.config(s, pc(0)), result{pcs: []uint64{pc(0), pc(2)}, end: EndError, rule: "final record not at task pt_regs", addr: fake}
		}},
		{"final without task pt_regs", func(t *testing.T) (*Config, result) {
			m := newMachine(t)
			s := m.taskStack("task", stackTop, TaskStackSize)
			s.call(pc(1))
			c := m.config(s, pc(0))
			c.TaskPtRegs = 0
			return c, result{pcs: []uint64{pc(0), pc(1)}, end: EndError, rule: "final record not at task pt_regs", addr: s.regs + PtRegsStackFrameOff}
		}},
		{"bad meta type 0", func(t *testing.T) (*Config, result) {
			m := newMachine(t)
			s := m.taskStack("task", stackTop, TaskStackSize)
			s.call(pc(1))
			s.store(s.regs+PtRegsStackFrameOff+MetaTypeOff, MetaNone)
			return m.config(s, pc(0)), result{pcs: []uint64{pc(0), pc(1)}, end: EndError, rule: "bad meta record type", addr: s.regs + PtRegsStackFrameOff}
		}},
		{"bad meta type 3", func(t *testing.T) (*Config, result) {
			m := newMachine(t)
			s := m.taskStack("task", stackTop, TaskStackSize)
			s.call(pc(1))
			s.store(s.regs+PtRegsStackFrameOff+MetaTypeOff, 3)
			return m.config(s, pc(0)), result{pcs: []uint64{pc(0), pc(1)}, end: EndError, rule: "bad meta record type", addr: s.regs + PtRegsStackFrameOff}
		}},
		{"meta record crosses stack end", func(t *testing.T) (*Config, result) {
			// {0, 0} in the top 16 bytes: the type word is past the end.
			m := newMachine(t)
			irq := m.stack(IRQ, "irq", stackTop+0x100000, IRQStackSize)
			irq.fp = irq.s.High - 16
			irq.sp -= 16
			irq.call(pc(1))
			return m.config(irq, pc(0)), result{pcs: []uint64{pc(0), pc(1)}, end: EndError, rule: "object crosses stack end", addr: irq.s.High - 16}
		}},
		{"pt_regs on the same stack", func(t *testing.T) (*Config, result) {
			m := newMachine(t)
			s := m.taskStack("task", stackTop, TaskStackSize)
			s.call(pc(1))
			s.exception(pc(2), pc(99))
			s.call(pc(3))
			return m.config(s, pc(0)), result{pcs: []uint64{pc(0), pc(3), pc(2), pc(1)}, end: EndFinal}
		}},
		{"pt_regs below the stack", func(t *testing.T) (*Config, result) {
			// A PT_REGS meta record too close to the stack bottom for the
			// pt_regs around it.
			m := newMachine(t)
			irq := m.stack(IRQ, "irq", stackTop+0x100000, IRQStackSize)
			meta := irq.s.Low + 64
			irq.store(meta+MetaTypeOff, MetaPtRegs)
			return withMem(m.mem, &Config{Stacks: m.stacks, FP: meta, PC: pc(0)}),
				result{pcs: []uint64{pc(0)}, end: EndError, rule: "pt_regs outside stacks", addr: meta - PtRegsStackFrameOff}
		}},
		{"pt_regs overlap consumed record", func(t *testing.T) (*Config, result) {
			// The pt_regs would start below a record already consumed.
			m := newMachine(t)
			s := m.taskStack("task", stackTop, TaskStackSize)
			s.call(pc(1))
			s.sp -= 64
			meta := s.sp
			s.store(meta+MetaTypeOff, MetaPtRegs)
			s.fp = meta
			s.call(pc(2))
			return m.config(s, pc(0)), result{pcs: []uint64{pc(0), pc(2)}, end: EndError, rule: "fp not increasing", addr: meta - PtRegsStackFrameOff}
		}},
		{"fp below pt_regs offset", func(t *testing.T) (*Config, result) {
			m := newMachine(t)
			low := uint64(0x100)
			st := m.stack(Extra, "low", low, 0x1000)
			st.store(low+MetaTypeOff, MetaPtRegs)
			return withMem(m.mem, &Config{Stacks: m.stacks, FP: low, PC: pc(0)}),
				result{pcs: []uint64{pc(0)}, end: EndError, rule: "pt_regs outside stacks", addr: low}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, want := tt.build(t)
			frames, end, err := walkAll(t, c)
			if got := pcs(frames); !slices.Equal(got, want.pcs) {
				t.Errorf("pcs %x, want %x", got, want.pcs)
			}
			if end != want.end {
				t.Errorf("end %v, want %v (err %v)", end, want.end, err)
			}
			if want.rule == "" {
				if err != nil {
					t.Fatalf("err %v", err)
				}
				return
			}
			wantCorrupt(t, err, want.rule, want.addr)
			// Save agrees with Walk: same frames so far, same error.
			store := make([]uint64, 64)
			n, serr := Save(c, store, 0)
			if !slices.Equal(store[:n], want.pcs) || serr == nil || serr.Error() != err.Error() {
				t.Errorf("Save: %x, %v", store[:n], serr)
			}
		})
	}
}

func TestZeroFPEnds(t *testing.T) {
	// An AAPCS64 user-space chain: the outermost record has fp 0.
	m := newMachine(t)
	s := m.stack(Extra, "user stack", 0x7fff0000, 0x10000)
	s.fp = 0
	s.call(pc(1))
	s.call(pc(2))
	c := m.config(s, pc(0))
	want := []uint64{pc(0), pc(2), pc(1)}
	c.ZeroFPEnds = true
	frames, end, err := walkAll(t, c)
	if err != nil || end != EndZeroFP || !end.Complete() || !slices.Equal(pcs(frames), want) {
		t.Fatalf("ZeroFPEnds: end %v err %v pcs %x", end, err, pcs(frames))
	}
	c.ZeroFPEnds = false
	frames, end, err = walkAll(t, c)
	if end != EndError || !slices.Equal(pcs(frames), want) {
		t.Fatalf("kernel rules: end %v pcs %x", end, pcs(frames))
	}
	wantCorrupt(t, err, "fp outside stacks", 0)
	c.ZeroFPEnds, c.Reliable = true, true
	if _, end, err = walkAll(t, c); end != EndError || !errors.Is(err, ErrUnreliable) {
		t.Fatalf("reliable ZeroFPEnds: end %v err %v", end, err)
	}
}

func TestBadConfig(t *testing.T) {
	m, s, _ := taskChain(t, 2)
	tests := []struct {
		name   string
		mutate func(c *Config)
		want   string
	}{
		{"no memory", func(c *Config) { c.Stacks[0].Data = nil }, "has no Data"},
		{"short data", func(c *Config) { c.Stacks[0].Data = make([]byte, c.Stacks[0].High-c.Stacks[0].Low-8) }, "Data holds 0x3ff8 bytes, want 0x4000"},
		{"long data", func(c *Config) { c.Stacks[0].Data = make([]byte, c.Stacks[0].High-c.Stacks[0].Low+1) }, "Data holds"},
		{"misaligned stack", func(c *Config) { c.Stacks[0].Low += 4 }, "not 8-byte aligned"},
		{"empty stack", func(c *Config) { c.Stacks[0].High = c.Stacks[0].Low }, "empty"},
		{"overlap", func(c *Config) {
			c.Stacks = append(c.Stacks, Stack{Kind: IRQ, Low: c.Stacks[0].High - 8, High: c.Stacks[0].High + 64, Name: "bad", Data: make([]byte, 72)})
		}, "overlaps"},
		{"unmapped", func(c *Config) { c.Stacks[0].High += 4096 }, "Data holds 0x4000 bytes, want 0x5000"},
	}
	for _, tt := range tests {
		c := m.config(s, pc(0))
		tt.mutate(c)
		_, end, err := walkAll(t, c)
		if end != EndError || err == nil || !strings.Contains(err.Error(), tt.want) || errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: end %v err %v", tt.name, end, err)
		}
	}
	// A valid config with many stacks (more than the inline buffer).
	c := m.config(s, pc(0))
	for i := range 10 {
		c.Stacks = append(c.Stacks, Stack{Kind: Extra, Low: 0x10000 * uint64(i+1), High: 0x10000*uint64(i+1) + 0x100, Data: make([]byte, 0x100)})
	}
	if _, end, err := walkAll(t, c); end != EndFinal || err != nil {
		t.Fatalf("many stacks: %v %v", end, err)
	}
}

func TestStrings(t *testing.T) {
	for _, tt := range []struct{ got, want string }{
		{Task.String(), "task"}, {SDEICritical.String(), "sdei-critical"}, {Extra.String(), "extra"},
		{StackKind(99).String(), "StackKind(99)"},
		{OriginRegsPC.String(), "regs-pc"}, {OriginCaller.String(), "caller"}, {OriginGCS.String(), "gcs"}, {Origin(99).String(), "Origin(99)"},
		{EndFinal.String(), "final"}, {EndStopped.String(), "stopped"}, {End(9).String(), "End(9)"},
	} {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
	if !EndFinal.Complete() || !EndZeroFP.Complete() || EndStopped.Complete() || EndError.Complete() {
		t.Error("End.Complete wrong")
	}
	if TaskPtRegsAddr(0x10000, PtRegsLayout{}) != 0x10000-320 {
		t.Error("TaskPtRegsAddr")
	}
}

func TestUnwinderMisuse(t *testing.T) {
	var u Unwinder
	if u.Next() || u.End() != EndError || u.Err() == nil {
		t.Fatal("zero Unwinder walked")
	}
	u.Init(nil)
	if u.Next() || u.End() != EndError || u.Err() == nil {
		t.Fatal("nil Config walked")
	}
	if n, end, err := SaveEnd(nil, make([]uint64, 4), 0); n != 0 || end != EndError || err == nil {
		t.Fatal("SaveEnd(nil)")
	}
}
