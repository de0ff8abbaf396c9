package scs

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/unwindkit/unwindkit/internal/mem"
	"github.com/unwindkit/unwindkit/percpu"
)

func TestConfigSizes(t *testing.T) {
	for _, tc := range []struct {
		size uint64
		ok   bool
		want uint64
	}{
		{0, true, DefaultSize},
		{64, true, 64},
		{1024, true, 1024},
		{4096, true, 4096},
		{16384, true, 16384},
		{72, true, 72},
		{56, false, 0},
		{100, false, 0},
		{4097, false, 0},
	} {
		mm := &mem.Memory{}
		m, err := New(Config{Size: tc.size, NumCPU: 2}, memAlloc(mm, scsBase))
		if (err == nil) != tc.ok {
			t.Errorf("size %d: err = %v, want ok=%v", tc.size, err, tc.ok)
			continue
		}
		if !tc.ok {
			continue
		}
		if m.Config().Size != tc.want {
			t.Errorf("size %d: config size %d, want %d", tc.size, m.Config().Size, tc.want)
		}
		// Per CPU: IRQ, SDEI normal, SDEI critical, swapper task.
		if got := len(mm.Regions()); got != 8 {
			t.Errorf("size %d: %d regions, want 8", tc.size, got)
		}
		for _, r := range mm.Regions() {
			if v, _ := r.Load(r.Base + tc.want - 8); v != EndMagic {
				t.Errorf("size %d: region %s last word %#x, want end magic", tc.size, r, v)
			}
			if r.Kind != "scs" {
				t.Errorf("region %s kind %q", r, r.Kind)
			}
		}
	}
}

func TestNewErrors(t *testing.T) {
	if _, err := New(Config{Policy: OnStack}, memAlloc(&mem.Memory{}, scsBase)); err == nil {
		t.Error("OnStack without Mem: no error")
	}
	if _, err := New(Config{}, nil); err == nil {
		t.Error("nil alloc: no error")
	}
	if _, err := New(Config{NumCPU: -1}, memAlloc(&mem.Memory{}, scsBase)); err == nil {
		t.Error("negative NumCPU: no error")
	}
	if _, err := New(Config{Policy: 7}, memAlloc(&mem.Memory{}, scsBase)); err == nil {
		t.Error("bad policy: no error")
	}
	bad := func(name, kind string, size uint64) (uint64, []uint64, error) {
		return scsBase, make([]uint64, size/16), nil
	}
	if _, err := New(Config{}, bad); err == nil {
		t.Error("short region: no error")
	}
	fail := func(name, kind string, size uint64) (uint64, []uint64, error) { return 0, nil, errors.New("no memory") }
	if _, err := New(Config{}, fail); err == nil {
		t.Error("failing alloc: no error")
	}
}

// TestPushPopCapacity checks, for every size, that exactly size/8-1 pushes
// fit, that the push that would overwrite the end magic is refused without
// writing, that the full stack is not corrupt by the kernel's rule, and
// that pops return the pushes in reverse and stop at the base.
func TestPushPopCapacity(t *testing.T) {
	for _, size := range []uint64{64, 1024, 4096, 16384} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			r := newRig(t, Config{Size: size})
			m := r.m
			capacity := int(size/8 - 1)
			for i := range capacity {
				mustPush(t, m, 0, uint64(i)+1)
			}
			if err := m.CheckCorruption(0); err != nil {
				t.Fatalf("full stack reported corrupt: %v", err)
			}
			x18 := m.X18(0)
			err := m.Push(0, 0xbad)
			var ce *CorruptError
			if !errors.As(err, &ce) || ce.Rule != "scs overflow" || ce.Addr != x18 {
				t.Fatalf("overflowing push: %v, want scs overflow at %#x", err, x18)
			}
			if m.X18(0) != x18 {
				t.Fatal("refused push moved x18")
			}
			task := m.Current(0)
			if v := task.st.load(task.Base() + size - 8); v != EndMagic {
				t.Fatalf("end magic %#x after refused push", v)
			}
			got, err := saveAll(m, 0)
			if err != nil || len(got) != capacity || got[0] != uint64(capacity) || got[capacity-1] != 1 {
				t.Fatalf("Save of full stack: %d entries, err %v", len(got), err)
			}
			for i := capacity; i > 0; i-- {
				v, err := m.Pop(0)
				if err != nil || v != uint64(i) {
					t.Fatalf("pop: %#x, %v; want %#x", v, err, i)
				}
			}
			_, err = m.Pop(0)
			if !errors.As(err, &ce) || ce.Rule != "scs underflow" {
				t.Fatalf("pop at base: %v", err)
			}
			if m.X18(0) != task.Base() {
				t.Fatal("x18 not at base")
			}
			s := m.Stats()
			if s.Pushes != uint64(capacity) || s.Pops != uint64(capacity) {
				t.Fatalf("stats: %d pushes %d pops, want %d", s.Pushes, s.Pops, capacity)
			}
		})
	}
}

// TestCheckCorruption mirrors scs_corrupted: sp - base >= size - 1 bytes
// (unsigned) or the end magic changed.
func TestCheckCorruption(t *testing.T) {
	const size = 1024
	for _, tc := range []struct {
		name  string
		off   int64 // x18 - base, bytes
		magic uint64
		rule  string // "" for not corrupt
	}{
		{"empty", 0, EndMagic, ""},
		{"one entry", 8, EndMagic, ""},
		{"full", size - 8, EndMagic, ""},
		{"over magic", size, EndMagic, "scs overflow"},
		{"unaligned just below limit", size - 1, EndMagic, "scs overflow"},
		{"unaligned just below full", size - 2, EndMagic, ""},
		{"below base", -8, EndMagic, "scs overflow"},
		{"magic overwritten", 16, 0x1234, "scs end magic overwritten"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, Config{Size: size})
			task := r.m.Current(0)
			task.st.store(task.Base()+size-8, tc.magic)
			r.m.SetX18(0, task.Base()+uint64(tc.off))
			err := r.m.CheckCorruption(0)
			var ce *CorruptError
			switch {
			case tc.rule == "" && err != nil:
				t.Fatalf("unexpected %v", err)
			case tc.rule != "" && (!errors.As(err, &ce) || ce.Rule != tc.rule):
				t.Fatalf("got %v, want rule %q", err, tc.rule)
			}
		})
	}
}

func TestPushPopBadX18(t *testing.T) {
	r := newRig(t, Config{Size: 1024})
	m := r.m
	base := m.Current(0).Base()
	for _, tc := range []struct {
		x18  uint64
		rule string
	}{
		{base + 4, "misaligned scs pointer"},
		{base - 8, "scs pointer outside region"},
		{base + 4096, "scs pointer outside region"},
		{0, "scs pointer outside region"},
	} {
		m.SetX18(0, tc.x18)
		var ce *CorruptError
		if err := m.Push(0, 1); !errors.As(err, &ce) || ce.Rule != tc.rule {
			t.Errorf("push with x18 %#x: %v, want %q", tc.x18, err, tc.rule)
		}
		if _, err := m.Pop(0); !errors.As(err, &ce) {
			t.Errorf("pop with x18 %#x: %v, want corrupt", tc.x18, err)
		}
		if m.X18(0) != tc.x18 {
			t.Errorf("refused op moved x18")
		}
	}
}

// TestNestingRules checks every transition from every state: the allowed
// ones succeed, the others fail with ErrNesting and change nothing.
func TestNestingRules(t *testing.T) {
	type op struct {
		name string
		do   func(r *rig) error
	}
	ops := []op{
		{"irq", func(r *rig) error { return r.enterIRQ(0, 1) }},
		{"sdei-normal", func(r *rig) error { return r.m.EnterSDEI(0, false, 0, 2) }},
		{"sdei-critical", func(r *rig) error { return r.m.EnterSDEI(0, true, 0, 3) }},
		{"exit-irq", func(r *rig) error { return r.exitIRQ(0) }},
		{"exit-sdei", func(r *rig) error { return r.m.ExitSDEI(0) }},
		{"switch", func(r *rig) error {
			tk, err := r.m.NewTask("t")
			if err != nil {
				return err
			}
			return r.m.Switch(0, tk)
		}},
	}
	// Reachable states as the sequence of entries from task context.
	states := [][]Context{
		{}, {CtxIRQ}, {CtxSDEINormal}, {CtxSDEICritical}, {CtxIRQ, CtxSDEINormal},
		{CtxIRQ, CtxSDEICritical}, {CtxSDEINormal, CtxSDEICritical}, {CtxIRQ, CtxSDEINormal, CtxSDEICritical},
	}
	allowed := func(st []Context, o string) bool {
		in := CtxTask
		if len(st) > 0 {
			in = st[len(st)-1]
		}
		switch o {
		case "irq":
			return in == CtxTask
		case "sdei-normal":
			return in < CtxSDEINormal
		case "sdei-critical":
			return in < CtxSDEICritical
		case "exit-irq":
			return in == CtxIRQ
		case "exit-sdei":
			return in == CtxSDEINormal || in == CtxSDEICritical
		case "switch":
			return in == CtxTask
		}
		return false
	}
	for _, p := range Policies {
		for _, st := range states {
			for _, o := range ops {
				t.Run(fmt.Sprintf("%s/%v/%s", p, st, o.name), func(t *testing.T) {
					r := newRig(t, Config{Policy: p, Size: 256, KeepInterruptedPC: true})
					mustPush(t, r.m, 0, 0x10)
					for _, c := range st {
						if err := r.enter(0, c, 0x20); err != nil {
							t.Fatal(err)
						}
						mustPush(t, r.m, 0, 0x30)
					}
					before, _ := r.m.View(0)
					beforeCtx, beforeX18 := r.m.Context(0), r.m.X18(0)
					err := o.do(r)
					if allowed(st, o.name) {
						if err != nil {
							t.Fatalf("allowed op failed: %v", err)
						}
						return
					}
					if !errors.Is(err, ErrNesting) {
						t.Fatalf("got %v, want ErrNesting", err)
					}
					after, _ := r.m.View(0)
					if !reflect.DeepEqual(before, after) || r.m.Context(0) != beforeCtx || r.m.X18(0) != beforeX18 {
						t.Fatal("refused op changed state")
					}
				})
			}
		}
	}
}

func TestBadCPU(t *testing.T) {
	r := newRig(t, Config{NumCPU: 2})
	m := r.m
	var re *percpu.RangeError
	for _, err := range []error{
		m.Push(2, 1), m.EnterIRQ(-1, 0, 0), m.ExitIRQ(5), m.EnterSDEI(2, false, 0, 0),
		m.ExitSDEI(2), m.Switch(3, m.Current(0)), m.CheckCorruption(2), m.SetX18(2, 0),
	} {
		if !errors.As(err, &re) {
			t.Errorf("got %v, want *percpu.RangeError", err)
		}
	}
	if _, err := m.Pop(2); !errors.As(err, &re) {
		t.Errorf("pop: %v", err)
	}
	if _, err := m.View(2); !errors.As(err, &re) {
		t.Errorf("view: %v", err)
	}
	if m.Context(9) != CtxTask || m.X18(9) != 0 || m.Current(9) != nil || m.Base(9, CtxIRQ) != 0 {
		t.Error("accessors on bad cpu")
	}
}

// TestIRQRestartsAtBase: each IRQ (and SDEI) entry starts at its base.
func TestIRQRestartsAtBase(t *testing.T) {
	for _, p := range Policies {
		r := newRig(t, Config{Policy: p})
		m := r.m
		irqBase := m.Base(0, CtxIRQ)
		for round := range 3 {
			if err := r.enterIRQ(0, 0); err != nil {
				t.Fatal(err)
			}
			if m.X18(0) != irqBase {
				t.Fatalf("%s round %d: IRQ x18 %#x, want base %#x", p, round, m.X18(0), irqBase)
			}
			for i := range 5 - round {
				mustPush(t, m, 0, retAddr(CtxIRQ, i))
			}
			if err := m.EnterSDEI(0, false, 0, 0); err != nil {
				t.Fatal(err)
			}
			if m.X18(0) != m.Base(0, CtxSDEINormal) {
				t.Fatalf("SDEI x18 %#x not at base", m.X18(0))
			}
			mustPush(t, m, 0, 1)
			if err := m.ExitSDEI(0); err != nil {
				t.Fatal(err)
			}
			if m.X18(0) != irqBase+uint64(5-round)*8 {
				t.Fatalf("%s: IRQ x18 not restored after SDEI", p)
			}
			if err := r.exitIRQ(0); err != nil {
				t.Fatal(err)
			}
			if m.X18(0) != m.Current(0).Base() {
				t.Fatalf("%s: task x18 %#x not restored", p, m.X18(0))
			}
		}
	}
}

func TestSwitch(t *testing.T) {
	r := newRig(t, Config{NumCPU: 2, Size: 512})
	m := r.m
	a, err := m.NewTask("a")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := m.NewTask("b")
	if a.CPU() != -1 || a.SP() != a.Base() || a.Name() != "a" {
		t.Fatal("new task state")
	}
	if err := m.Switch(0, a); err != nil {
		t.Fatal(err)
	}
	mustPush(t, m, 0, 0xa1)
	mustPush(t, m, 0, 0xa2)
	if err := m.Switch(0, b); err != nil {
		t.Fatal(err)
	}
	if a.SP() != a.Base()+16 || a.CPU() != -1 || b.CPU() != 0 || m.X18(0) != b.Base() {
		t.Fatal("switch did not save/load scs_sp")
	}
	if err := m.Switch(1, b); err == nil {
		t.Fatal("task current on two CPUs")
	}
	if err := m.Switch(1, a); err != nil {
		t.Fatal(err)
	}
	got, err := saveAll(m, 1)
	if err != nil || !slices.Equal(got, []uint64{0xa2, 0xa1}) {
		t.Fatalf("task a on cpu 1: %x, %v", got, err)
	}
	// A corrupted outgoing task stops the switch (scs_overflow_check).
	a.st.store(a.Base()+512-8, 0)
	if err := m.Switch(1, m.Current(1)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("switch away from corrupted task: %v", err)
	}
	if m.Current(1) != a {
		t.Fatal("refused switch changed current")
	}
	if err := m.Switch(0, nil); err == nil {
		t.Fatal("nil task")
	}
	if s := m.Stats(); s.Switches != 3 || s.Switch != (TotalCost{3, 3, 9}) {
		t.Fatalf("stats %+v", s)
	}
}

func TestDisabledModel(t *testing.T) {
	m, err := New(Config{Disabled: true, Policy: OnStack, NumCPU: 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Push(0, 1); !errors.Is(err, ErrNotSupported) {
		t.Fatalf("push: %v", err)
	}
	if _, err := m.Pop(0); !errors.Is(err, ErrNotSupported) {
		t.Fatalf("pop: %v", err)
	}
	if err := m.EnterIRQ(0, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := m.EnterSDEI(0, true, 0, 0); err != nil {
		t.Fatal(err)
	}
	if m.Context(0) != CtxSDEICritical {
		t.Fatal("contexts not tracked when disabled")
	}
	if _, err := m.Save(0, make([]uint64, 4), 0); !errors.Is(err, ErrNotSupported) {
		t.Fatalf("save: %v", err)
	}
	if err := m.CheckCorruption(0); !errors.Is(err, ErrNotSupported) {
		t.Fatal(err)
	}
	m.ExitSDEI(0)
	m.ExitIRQ(0)
	tk, err := m.NewTask("t")
	if err != nil || tk.st.words != nil {
		t.Fatalf("disabled NewTask: %v", err)
	}
	if err := m.Switch(1, tk); err != nil || m.Current(1) != tk {
		t.Fatalf("disabled Switch: %v", err)
	}
	if v, err := m.View(1); err != nil || !v.Disabled {
		t.Fatalf("disabled View: %+v %v", v, err)
	}
	if s := m.Stats(); s.Entry != (TotalCost{}) || s.Entries[CtxIRQ] != 1 || s.Exits[CtxSDEICritical] != 1 || s.Switches != 1 {
		t.Fatalf("disabled stats %+v", s)
	}
}

func TestOnStackSlot(t *testing.T) {
	r := newRig(t, Config{Policy: OnStack})
	m := r.m
	mustPush(t, m, 0, 1)
	x18 := m.X18(0)
	if err := m.EnterIRQ(0, r.sp[0]-8, 0); err == nil {
		t.Fatal("misaligned slot accepted")
	}
	if err := m.EnterIRQ(0, 0x1000, 0); err == nil {
		t.Fatal("unmapped slot accepted")
	}
	if m.Context(0) != CtxTask {
		t.Fatal("refused entry changed context")
	}
	slot := r.sp[0] - 16
	r.mem.Store(slot+8, 0x5555)
	if err := r.enterIRQ(0, 0); err != nil {
		t.Fatal(err)
	}
	if v, _ := r.mem.Load(slot); v != x18 {
		t.Fatalf("stp stored %#x, want x18 %#x", v, x18)
	}
	if v, _ := r.mem.Load(slot + 8); v != 0 {
		t.Fatalf("stp stored %#x beside x18, want xzr", v)
	}
	v, _ := m.View(0)
	if s := v.Segs[1]; !s.Hidden || s.TopFrom != OnInterruptedStack || s.TopAddr != slot || s.Top != 0 {
		t.Fatalf("task segment %+v", s)
	}
	if err := r.exitIRQ(0); err != nil {
		t.Fatal(err)
	}
	if m.X18(0) != x18 {
		t.Fatal("ldp did not restore x18")
	}
}

func TestSetSaved(t *testing.T) {
	for _, p := range Policies {
		r := newRig(t, Config{Policy: p})
		m := r.m
		if err := r.enterIRQ(0, 0); err != nil {
			t.Fatal(err)
		}
		if err := m.EnterSDEI(0, false, 0, 0); err != nil {
			t.Fatal(err)
		}
		if err := m.SetSaved(0, CtxTask, 1); err == nil {
			t.Error("SetSaved(task) accepted")
		}
		m.SetSaved(0, CtxSDEINormal, 0x1234)
		if err := m.ExitSDEI(0); err != nil {
			t.Fatal(err)
		}
		if m.X18(0) != 0x1234 {
			t.Errorf("%s: SDEI exit restored %#x, want the injected value", p, m.X18(0))
		}
		m.SetSaved(0, CtxIRQ, 0x5678)
		if err := r.exitIRQ(0); err != nil {
			t.Fatal(err)
		}
		if m.X18(0) != 0x5678 {
			t.Errorf("%s: IRQ exit restored %#x, want the injected value", p, m.X18(0))
		}
	}
}
