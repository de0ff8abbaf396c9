package machine

import (
	"errors"
	"fmt"
	"github.com/unwindkit/unwindkit/fp"
	"strings"
	"testing"

	"github.com/unwindkit/unwindkit/unwind"
)

func testFuncs() []Func {
	return []Func{
		{Name: "kthread_fn"},
		{Name: "do_work", Locals: 48},
		{Name: "alloc_obj"},
		{Name: "nofp", NoFrame: true},
		{Name: "noscs", NoSCS: true},
		{Name: "leaf", Leaf: true},
		{Name: "irq_driver"},
		{Name: "sdei_cb"},
	}
}

func newTestMachine(t testing.TB, mod func(*Config)) (*Machine, *CPU) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Funcs = testFuncs()
	if mod != nil {
		mod(&cfg)
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	task, err := m.NewTask("t0", "kthread_fn")
	if err != nil {
		t.Fatal(err)
	}
	c := m.CPU(0)
	if err := c.Switch(task); err != nil {
		t.Fatal(err)
	}
	return m, c
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func (m *Machine) names(pcs []uint64) string {
	var b strings.Builder
	for i, pc := range pcs {
		if i > 0 {
			b.WriteString(" <- ")
		}
		b.WriteString(m.sym.Name(pc))
	}
	return b.String()
}

// checkBoth unwinds the CPU with both methods and compares them with the
// model's expectations.
func checkBoth(t *testing.T, m *Machine, c *CPU, opts SaveOptions) {
	t.Helper()
	for _, method := range []unwind.Method{unwind.MethodSCS, unwind.MethodFP} {
		if method == unwind.MethodSCS && !m.cfg.SCS || method == unwind.MethodFP && !m.cfg.FramePointers {
			continue
		}
		want := c.Expect(method, opts)
		store := make([]uint64, 512)
		n, err := c.Unwind(method, Inline, store, opts)
		got := store[:n]
		if !errors.Is(err, want.Err) || (err == nil) != (want.Err == nil) {
			t.Errorf("%v: err = %v, want %v", method, err, want.Err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want.PCs) {
			t.Errorf("%v mismatch:\n got  %s\n want %s", method, m.names(got), m.names(want.PCs))
		}
	}
}

func TestNestedContexts(t *testing.T) {
	for _, pol := range []Policy{ThreadInfo, OnStack, PerCPU} {
		for _, keep := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/keep=%v", pol, keep), func(t *testing.T) {
				m, c := newTestMachine(t, func(cfg *Config) { cfg.Policy = pol; cfg.KeepInterruptedPC = keep })
				must(t, c.Call("do_work"))
				must(t, c.Call("nofp"))
				must(t, c.Call("alloc_obj"))
				checkBoth(t, m, c, SaveOptions{})
				must(t, c.Call("leaf"))
				must(t, c.EnterIRQ())
				checkBoth(t, m, c, SaveOptions{})
				must(t, c.Call("irq_driver"))
				must(t, c.Call("noscs"))
				must(t, c.Call("alloc_obj"))
				checkBoth(t, m, c, SaveOptions{})
				must(t, c.EnterSDEI(false))
				must(t, c.Call("sdei_cb"))
				checkBoth(t, m, c, SaveOptions{})
				must(t, c.EnterSDEI(true))
				must(t, c.Call("sdei_cb"))
				checkBoth(t, m, c, SaveOptions{})
				checkBoth(t, m, c, SaveOptions{StopAtBoundary: true})
				checkBoth(t, m, c, SaveOptions{Skip: 3})
				must(t, c.Return())
				must(t, c.ExitSDEI())
				must(t, c.Return())
				must(t, c.ExitSDEI())
				checkBoth(t, m, c, SaveOptions{})
				for i := 0; i < 3; i++ {
					must(t, c.Return())
				}
				must(t, c.ExitIRQ())
				checkBoth(t, m, c, SaveOptions{})
				must(t, c.Return())
				checkBoth(t, m, c, SaveOptions{})
			})
		}
	}
}

// TestBlockedTask switches a task out in the middle of a chain and unwinds
// it from its saved state, as stack_trace_save_tsk does.
func TestBlockedTask(t *testing.T) {
	m, c := newTestMachine(t, func(cfg *Config) { cfg.PAC = true })
	must(t, c.Call("do_work"))
	must(t, c.Call("alloc_obj"))
	t0 := c.Task()
	if _, err := t0.Source(unwind.MethodFP); !errors.Is(err, ErrTaskRunning) {
		t.Fatalf("running task: %v", err)
	}
	t1, err := m.NewTask("t1", "kthread_fn")
	must(t, err)
	must(t, c.Switch(t1))
	src, err := t0.Source(unwind.MethodFP)
	must(t, err)
	var got []string
	var first unwind.Origin
	for f, err := range src.Frames() {
		must(t, err)
		if len(got) == 0 {
			first = f.Origin
		}
		got = append(got, m.sym.Func(f.PC))
	}
	if want := "alloc_obj do_work kthread_fn ret_from_fork"; strings.Join(got, " ") != want || first != fp.OriginTask {
		t.Fatalf("blocked FP walk %v (first source %v), want %s from a task source", got, first, want)
	}
	src, err = t0.Source(unwind.MethodSCS)
	must(t, err)
	store := make([]uint64, 16)
	n, err := unwind.Save(src, store, 0)
	must(t, err)
	if got := m.names(store[:n]); !strings.Contains(got, "do_work") || strings.Contains(got, "alloc_obj") {
		t.Fatalf("blocked SCS copy %s", got)
	}
}
