package machine

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/unwindkit/unwindkit/internal/arm64"
	"github.com/unwindkit/unwindkit/ptrauth"
	"github.com/unwindkit/unwindkit/unwind"
)

// variants is the configuration matrix of the differential tests.
func variants() []Config {
	var out []Config
	for _, pol := range []Policy{ThreadInfo, OnStack, PerCPU} {
		for _, keep := range []bool{false, true} {
			for _, pac := range []bool{false, true} {
				for _, tr := range []int{0, 1, 2, 3} { // none, fgraph, kretprobes, both
					cfg := DefaultConfig()
					cfg.NumCPU = 2
					cfg.Policy, cfg.KeepInterruptedPC, cfg.PAC = pol, keep, pac
					cfg.FGraph, cfg.Kretprobes = tr&1 != 0, tr&2 != 0
					cfg.Funcs = testFuncs()
					if tr == 2 {
						cfg.Funcs[1].Kretprobe = true // only do_work probed
					}
					out = append(out, cfg)
				}
			}
		}
	}
	// Odd ones: small SCS, QARMA3 and 52-bit VA, no SCS, KASAN stacks.
	small := DefaultConfig()
	small.SCSSize, small.Funcs = 1024, testFuncs()
	q3 := DefaultConfig()
	q3.PAC, q3.Algorithm, q3.Funcs = true, ptrauth.QARMA3, testFuncs()
	q3.Layout = ptrauth.NewLayout(52, false)
	noscs := DefaultConfig()
	noscs.SCS, noscs.Funcs = false, testFuncs()
	kasan := DefaultConfig()
	kasan.KASAN, kasan.Funcs = true, testFuncs()
	return append(out, small, q3, noscs, kasan)
}

// script drives a machine from bytes: each byte picks an event. Misuse is
// allowed: it must fail and leave the ground truth unchanged. After every
// event both unwinders are checked against the model's expectation.
type script struct {
	t     testing.TB
	m     *Machine
	tasks []*Task
}

func newScript(t testing.TB, cfg Config) *script {
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := &script{t: t, m: m}
	for i := 0; i < 3; i++ {
		task, err := m.NewTask(fmt.Sprintf("t%d", i), []string{"kthread_fn", "do_work", "irq_driver"}[i])
		if err != nil {
			t.Fatal(err)
		}
		s.tasks = append(s.tasks, task)
	}
	for i := 0; i < m.NumCPU(); i++ {
		if err := m.CPU(i).Switch(s.tasks[i]); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func (s *script) step(b byte, store []uint64) {
	t, m := s.t, s.m
	c := m.CPU(int(b>>7) % m.NumCPU())
	names := m.cfg.Funcs
	before := c.Truth()
	var err error
	op := b & 0x7f
	switch {
	case op < 48:
		err = c.Call(names[int(op)%len(names)].Name)
	case op < 80:
		err = c.Return()
	case op < 88:
		err = c.EnterIRQ()
	case op < 96:
		err = c.ExitIRQ()
	case op < 102:
		err = c.EnterSDEI(op&1 == 1)
	case op < 110:
		err = c.ExitSDEI()
	case op < 114:
		err = c.Switch(s.tasks[int(op)%len(s.tasks)])
	default:
		s.checkOutOfLine(c, int(op)%4, store)
		return
	}
	if err != nil && !reflect.DeepEqual(before, c.Truth()) {
		t.Fatalf("failed event %#x (%v) changed the ground truth", b, err)
	}
	// One nesting state and one sequence lock: the CPU's chain of
	// contexts ends in the SCS model's context, and no step (failed ones
	// included) leaves a change open.
	if c.Task() != nil && c.cur().kind != c.Context() {
		t.Fatalf("event %#x: the chain is in %s context, the SCS model in %s", b, c.cur().kind, c.Context())
	}
	if c.Seq()%2 != 0 {
		t.Fatalf("event %#x (%v) left the CPU's sequence odd (%d)", b, err, c.Seq())
	}
	s.check(c, SaveOptions{}, store)
	s.checkBlocked(store)
	if op%9 == 0 {
		s.checkCompare(c)
	}
	if op%5 == 0 {
		s.check(c, SaveOptions{Skip: int(op) % 7, StopAtBoundary: op%2 == 0}, store)
	}
}

func (s *script) check(c *CPU, opts SaveOptions, store []uint64) {
	t, m := s.t, s.m
	if c.Task() == nil {
		return
	}
	for _, method := range []unwind.Method{unwind.MethodSCS, unwind.MethodFP} {
		want := fit(c.Expect(method, opts), store)
		n, err := c.Unwind(method, Inline, store, opts)
		if method == unwind.MethodSCS && !m.cfg.SCS || method == unwind.MethodFP && !m.cfg.FramePointers {
			if !errors.Is(err, unwind.ErrNotSupported) {
				t.Fatalf("%v disabled: err = %v", method, err)
			}
			continue
		}
		if !errors.Is(err, want.Err) || (err == nil) != (want.Err == nil) {
			t.Fatalf("%v %+v: err = %v, want %v\ntruth: %s", method, opts, err, want.Err, m.names(truthPCs(c)))
		}
		if method == unwind.MethodFP && opts.Skip == 0 {
			checkCallSites(t, m, c, store[:n])
		}
		if !slices.Equal(store[:n], want.PCs) {
			t.Fatalf("%v %+v mismatch in %s context:\n got   %s\n want  %s\n truth %s", method, opts, c.Context(),
				m.names(store[:n]), m.names(want.PCs), m.names(truthPCs(c)))
		}
	}
}

// checkCompare checks that CPU.Compare lines up every truth entry and
// accounts for exactly the frames each unwinder is expected to return.
func (s *script) checkCompare(c *CPU) {
	if c.Task() == nil {
		return
	}
	cmp, err := c.Compare(SaveOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	if len(cmp.Rows) != len(c.Truth()) {
		s.t.Fatalf("Compare: %d rows for %d truth entries", len(cmp.Rows), len(c.Truth()))
	}
	checkCompareRows(s.t, "", s.m, c, SaveOptions{}, cmp)
}

// checkBlocked unwinds every task that is not running (stack_trace_save_tsk)
// with both methods and checks the result against its expectation.
func (s *script) checkBlocked(store []uint64) {
	t, m := s.t, s.m
	for _, task := range s.tasks {
		if task.Truth() == nil {
			if _, err := task.Source(unwind.MethodFP); !errors.Is(err, ErrTaskRunning) {
				t.Fatalf("Source of running task %s: %v", task.Name, err)
			}
			continue
		}
		for _, method := range []unwind.Method{unwind.MethodSCS, unwind.MethodFP} {
			src, err := task.Source(method)
			if method == unwind.MethodSCS && !m.cfg.SCS || method == unwind.MethodFP && !m.cfg.FramePointers {
				if !errors.Is(err, unwind.ErrNotSupported) {
					t.Fatalf("blocked %v disabled: %v", method, err)
				}
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			want := fit(task.Expect(method, SaveOptions{}), store)
			n, err := unwind.Save(src, store, 0)
			if err != nil || !slices.Equal(store[:n], want.PCs) {
				t.Fatalf("blocked task %s, %v (err %v):\n got  %s\n want %s", task.Name, method, err,
					m.names(store[:n]), m.names(want.PCs))
			}
		}
	}
}

// checkOutOfLine checks the seed's skipnr+1 question: an out-of-line
// unwinder (stack_trace_save with its own frame) with skip k+1 returns what
// an inline one returns with skip k, and its first frame is the call site.
func (s *script) checkOutOfLine(c *CPU, k int, store []uint64) {
	if c.Task() == nil || c.Depth() == 0 {
		return
	}
	cur := c.cur().top().f
	if cur.spec.Leaf {
		if _, err := c.Unwind(unwind.MethodAuto, OutOfLine, store, SaveOptions{}); err == nil {
			s.t.Fatal("out-of-line unwind from a leaf succeeded")
		}
		return
	}
	// stack_trace_save cannot be called when its frame does not fit (the
	// task's stack, or a tracer's return stack, is full): an out-of-line
	// unwind then fails with the call's error and changes nothing.
	before := c.Truth()
	if err := c.Call(FnStackTraceSave); err != nil {
		n, err2 := c.Unwind(unwind.MethodAuto, OutOfLine, store, SaveOptions{})
		if n != 0 || fmt.Sprint(err2) != fmt.Sprint(err) || !reflect.DeepEqual(before, c.Truth()) {
			s.t.Fatalf("out-of-line unwind where stack_trace_save cannot be called: %d frames, %v; the call: %v", n, err2, err)
		}
		return
	}
	if err := c.Return(); err != nil {
		s.t.Fatal(err)
	}
	for _, method := range []unwind.Method{unwind.MethodSCS, unwind.MethodFP} {
		if method == unwind.MethodSCS && !s.m.cfg.SCS {
			continue
		}
		in := make([]uint64, len(store))
		n1, err1 := c.Unwind(method, Inline, in, SaveOptions{Skip: k})
		n2, err2 := c.Unwind(method, OutOfLine, store, SaveOptions{Skip: k + 1})
		if !slices.Equal(in[:n1], store[:n2]) || fmt.Sprint(err1) != fmt.Sprint(err2) {
			s.t.Fatalf("%v: out-of-line skip %d != inline skip %d:\n %s (%v)\n %s (%v)", method, k+1, k,
				s.m.names(store[:n2]), err2, s.m.names(in[:n1]), err1)
		}
		n0, _ := c.Unwind(method, OutOfLine, store, SaveOptions{})
		if want := cur.sites[FnStackTraceSave] + 4; n0 == 0 || store[0] != want {
			s.t.Fatalf("%v: out-of-line first frame %s, want the call site %s", method, s.m.sym.Name(store[0]), s.m.sym.Name(want))
		}
	}
}

// fit is the expectation x for an unwind into store: an expectation is
// for a store of any size, and a walk that fills store stops there,
// successfully. (The differential checks never ask for a reliable walk,
// where a full store is ErrUnreliable: fp's own tests check that.)
func fit(x Expectation, store []uint64) Expectation {
	if len(x.PCs) <= len(store) {
		return x
	}
	x.PCs = x.PCs[:len(store)]
	x.Err = nil
	return x
}

func truthPCs(c *CPU) []uint64 {
	var pcs []uint64
	for _, f := range c.Truth() {
		pcs = append(pcs, f.PC)
	}
	return pcs
}

func TestDifferentialRandom(t *testing.T) {
	steps := 400
	if testing.Short() {
		steps = 150
	}
	for i, cfg := range variants() {
		t.Run(fmt.Sprintf("%d/%v/keep=%v/pac=%v/fgraph=%v/kretprobes=%v/scs=%v", i, cfg.Policy, cfg.KeepInterruptedPC, cfg.PAC, cfg.FGraph, cfg.Kretprobes, cfg.SCS), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			s := newScript(t, cfg)
			store := make([]uint64, 600)
			for j := 0; j < steps; j++ {
				// Bias towards calls so that chains get deep.
				b := byte(rng.IntN(256))
				if rng.IntN(3) == 0 {
					b = b&0x80 | byte(rng.IntN(48))
				}
				s.step(b, store)
			}
		})
	}
}

func FuzzMachine(f *testing.F) {
	f.Add(uint8(0), []byte{0, 1, 2, 3, 80, 5, 100, 6, 101, 7, 120, 64, 108, 64, 108, 90})
	f.Add(uint8(13), []byte{1, 1, 1, 1, 1, 1, 1, 1, 81, 2, 97, 98, 120, 121, 122, 123})
	vs := variants()
	f.Fuzz(func(t *testing.T, v uint8, data []byte) {
		if len(data) > 2000 {
			data = data[:2000]
		}
		s := newScript(t, vs[int(v)%len(vs)])
		store := make([]uint64, 600)
		for _, b := range data {
			s.step(b, store)
		}
	})
}

// checkCallSites checks that the instruction before every return address
// the FP walk reports is a real bl or blr in the text region, except for
// interrupted pcs (which no call produced): what a reliable unwinder may
// verify.
func checkCallSites(t testing.TB, m *Machine, c *CPU, pcs []uint64) {
	t.Helper()
	interrupted := map[uint64]bool{}
	for _, tf := range c.Truth() {
		if tf.Interrupted {
			interrupted[tf.PC] = true
		}
	}
	for _, pc := range pcs {
		if interrupted[pc] {
			continue
		}
		insn, ok := m.Instruction(pc - 4)
		if !ok || !arm64.IsCall(insn) {
			t.Fatalf("return address %s does not follow a call (insn %#08x, %v)", m.sym.Name(pc), insn, ok)
		}
	}
}

// checkCompareRows checks cmp, what c.Compare(opts) returned: every row on
// which the techniques disagree is explained, and the rows hold exactly
// the frames each technique is expected to return for opts (its SCS rows
// only where the machine has an SCS). name prefixes the failure.
func checkCompareRows(t testing.TB, name string, m *Machine, c *CPU, opts SaveOptions, cmp *TruthComparison) {
	t.Helper()
	var inSCS, inFP int
	for _, r := range cmp.Rows {
		if r.InSCS {
			inSCS++
		}
		if r.InFP {
			inFP++
		}
		if m.cfg.SCS && m.cfg.FramePointers && r.InSCS != r.InFP && r.Note == "" {
			t.Fatalf("%sCompare: row %s differs without an explanation\n%s", name, m.sym.Name(r.Truth.PC), cmp)
		}
	}
	if w := len(c.Expect(unwind.MethodSCS, opts).PCs); m.cfg.SCS && inSCS != w {
		t.Fatalf("%sCompare: %d SCS rows, want %d\n%s", name, inSCS, w, cmp)
	}
	if w := len(c.Expect(unwind.MethodFP, opts).PCs); inFP != w {
		t.Fatalf("%sCompare: %d FP rows, want %d\n%s", name, inFP, w, cmp)
	}
}
