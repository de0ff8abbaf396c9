package slab

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/unwindkit/unwindkit/depot"
	"github.com/unwindkit/unwindkit/scs"
	"github.com/unwindkit/unwindkit/unwind/machine"
)

// want is what one of Demo's reports must say.
type want struct {
	kind, where, task string
	pid, allocPID     uint32
	freePID           uint32
	alloc, free       []string // function names, innermost first
	traceHas          []string // functions the call trace must contain, in order
	cache             string
}

func withFork(p path, entry string) []string {
	out := slices.Clone(p)
	slices.Reverse(out)
	return append(out, entry, machine.FnRetFromFork)
}

// irqStack is the recorded stack of an action at the end of p below
// handle_arch_irq, cut by the IRQ-entry filter after handle_arch_irq.
func irqStack(p path) []string {
	out := slices.Clone(p)
	slices.Reverse(out)
	return append(out, machine.FnHandleIRQ)
}

var demoWant = []want{
	{
		kind: "use-after-free", where: "skb_copy_bits", task: "netd", pid: 412,
		allocPID: 412, freePID: 1337, cache: "kmalloc-256",
		// Recorded inline in kmalloc / kfree: the first frame is the caller.
		alloc:    withFork(netdAlloc[:len(netdAlloc)-1], "net_rx_thread"),
		free:     irqStack(irqFree[:len(irqFree)-1]),
		traceHas: withFork(netdRead, "net_rx_thread"),
	},
	{
		kind: "use-after-free", where: "ghes_read_estatus", task: "writer", pid: 1337,
		allocPID: 1337, freePID: 37, cache: "kmalloc-128",
		alloc: irqStack(irqAlloc[:len(irqAlloc)-1]),
		free:  withFork(kworkerFree[:len(kworkerFree)-1], "worker_thread"),
		// The SDEI context, its entry, then the interrupted task.
		traceHas: append(append(withFork(sdeiRead, machine.FnSDEIHandler)[:len(sdeiRead)+1],
			machine.FnSDEIAsmHandler), withFork(writerRead, "el0_svc")...),
	},
	{
		kind: "double-free", where: "seq_release", task: "writer", pid: 1337,
		allocPID: 1337, freePID: 1337, cache: "kmalloc-64",
		alloc:    withFork(writerAlloc[:len(writerAlloc)-1], "el0_svc"),
		free:     withFork(writerFree[:len(writerFree)-1], "el0_svc"),
		traceHas: withFork(writerFree[:len(writerFree)-1], "el0_svc"),
	},
}

type variant struct {
	rec    Record
	policy machine.Policy
	pac    bool
}

func (v variant) String() string { return fmt.Sprintf("%v/%v/pac=%v", v.rec, v.policy, v.pac) }

func variants() []variant {
	var vs []variant
	for _, rec := range Records {
		for _, pol := range scs.Policies {
			for _, pac := range []bool{false, true} {
				vs = append(vs, variant{rec, pol, pac})
			}
		}
	}
	return vs
}

func demo(t *testing.T, v variant) []Report {
	t.Helper()
	s, err := New(Config{Record: v.rec, Policy: v.policy, PAC: v.pac})
	if err != nil {
		t.Fatal(err)
	}
	reps, err := s.Demo()
	if err != nil {
		t.Fatal(err)
	}
	return reps
}

// TestDemoReports checks every report of the scripted run, for every
// recording method, policy and PAC setting.
func TestDemoReports(t *testing.T) {
	for _, v := range variants() {
		t.Run(v.String(), func(t *testing.T) {
			reps := demo(t, v)
			if len(reps) != len(demoWant) {
				t.Fatalf("%d reports, want %d", len(reps), len(demoWant))
			}
			for i, w := range demoWant {
				r := &reps[i]
				if r.Kind != w.kind || !strings.HasPrefix(r.Where, w.where+"+0x") || r.Task != w.task || r.PID != w.pid {
					t.Errorf("report %d: %s in %s by %s/%d, want %s in %s+... by %s/%d",
						i, r.Kind, r.Where, r.Task, r.PID, w.kind, w.where, w.task, w.pid)
				}
				if r.AllocPID != w.allocPID || r.FreePID != w.freePID || r.Cache != w.cache {
					t.Errorf("report %d: alloc pid %d free pid %d cache %s, want %d %d %s",
						i, r.AllocPID, r.FreePID, r.Cache, w.allocPID, w.freePID, w.cache)
				}
				if r.Addr < r.Object || r.Addr >= r.Object+uint64(r.ObjSize) {
					t.Errorf("report %d: address %#x outside object [%#x, +%d)", i, r.Addr, r.Object, r.ObjSize)
				}
				if !isSubsequence(r.CallTraceFuncs(), w.traceHas) {
					t.Errorf("report %d: call trace %v does not contain %v in order", i, r.CallTraceFuncs(), w.traceHas)
				}
				if got := r.CallTraceFuncs(); len(got) == 0 || got[0] != w.where {
					t.Errorf("report %d: call trace starts %v, want %s", i, got, w.where)
				}
				text := r.String()
				for _, line := range []string{
					"BUG: KASAN: " + w.kind + " in " + r.Where + "\n",
					fmt.Sprintf("Allocated by task %d:\n", w.allocPID),
					fmt.Sprintf("Freed by task %d:\n", w.freePID),
					"which belongs to the cache " + w.cache,
				} {
					if !strings.Contains(text, line) {
						t.Errorf("report %d: text lacks %q:\n%s", i, line, text)
					}
				}
				if v.rec == RecordNone {
					if r.Alloc != nil || r.Free != nil || strings.Count(text, "(stack is not available)") != 2 {
						t.Errorf("report %d: stacks recorded without recording:\n%s", i, text)
					}
					continue
				}
				if got := r.AllocFuncs(); !slices.Equal(got, w.alloc) {
					t.Errorf("report %d: alloc stack\n got %v\nwant %v", i, got, w.alloc)
				}
				if got := r.FreeFuncs(); !slices.Equal(got, w.free) {
					t.Errorf("report %d: free stack\n got %v\nwant %v", i, got, w.free)
				}
				for _, f := range append(slices.Clone(r.Alloc), r.Free...) {
					if !strings.Contains(f, "+0x") || !strings.Contains(f, "/0x") {
						t.Errorf("report %d: frame %q not symbolized as func+0xoff/0xsize", i, f)
					}
				}
			}
		})
	}
}

func isSubsequence(s, sub []string) bool {
	i := 0
	for _, x := range s {
		if i < len(sub) && x == sub[i] {
			i++
		}
	}
	return i == len(sub)
}

// TestRecordersAgree: on this workload (no leaf, asm or frameless
// function between kmalloc and the IRQ entry) the SCS copy and the FP walk
// must record the same traces, so the reports are identical text, and the
// random workload leaves the same depot behind.
func TestRecordersAgree(t *testing.T) {
	ops := 3000
	if testing.Short() {
		ops = 600
	}
	for _, pol := range scs.Policies {
		for _, pac := range []bool{false, true} {
			name := fmt.Sprintf("%v/pac=%v", pol, pac)
			t.Run(name, func(t *testing.T) {
				a := demo(t, variant{RecordSCS, pol, pac})
				b := demo(t, variant{RecordFP, pol, pac})
				for i := range a {
					if a[i].String() != b[i].String() {
						t.Errorf("report %d differs:\nSCS:\n%s\nFP:\n%s", i, a[i].String(), b[i].String())
					}
				}
				var stats [2]Stats
				var traces [2][]string
				for i, rec := range []Record{RecordSCS, RecordFP} {
					s, err := New(Config{Record: rec, Policy: pol, PAC: pac})
					if err != nil {
						t.Fatal(err)
					}
					if err := s.Run(DefaultWorkload(ops)); err != nil {
						t.Fatal(err)
					}
					if n := len(s.Reports()); n != 0 {
						t.Fatalf("%v: %d reports from a bug-free workload:\n%s", rec, n, s.Reports()[0].String())
					}
					stats[i] = s.Stats()
					traces[i] = depotTraces(t, s)
				}
				if stats[0] != stats[1] {
					t.Errorf("stats differ: SCS %+v, FP %+v", stats[0], stats[1])
				}
				if !slices.Equal(traces[0], traces[1]) {
					t.Errorf("depot traces differ:\nSCS %v\nFP  %v", traces[0], traces[1])
				}
				if stats[0].Allocs == 0 || stats[0].Frees == 0 || stats[0].IRQs == 0 || stats[0].SDEIs == 0 || stats[0].Switches == 0 {
					t.Errorf("workload did not exercise everything: %+v", stats[0])
				}
			})
		}
	}
}

// depotTraces lists the symbolized traces of every live object's tracks.
func depotTraces(t *testing.T, s *Sim) []string {
	t.Helper()
	var out []string
	for _, c := range s.slab.caches {
		for _, o := range c.objs {
			for _, h := range []depot.Handle{o.alloc.stack, o.free.stack} {
				if h == 0 {
					continue
				}
				fr, err := s.fetch(h)
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, strings.Join(fr, ","))
			}
		}
	}
	return out
}

// TestIRQTracesCut: every trace recorded in IRQ context ends at
// handle_arch_irq (the IRQ-entry filter), and no trace contains a frame
// of the interrupted task.
func TestIRQTracesCut(t *testing.T) {
	s, err := New(Config{Record: RecordFP, Policy: machine.PerCPU})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Run(DefaultWorkload(500)); err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, c := range s.slab.caches {
		for _, o := range c.objs {
			if o.alloc.stack == 0 {
				continue
			}
			fr, err := s.fetch(o.alloc.stack)
			if err != nil {
				t.Fatal(err)
			}
			fns := funcsOf(fr)
			i := slices.Index(fns, machine.FnHandleIRQ)
			if i < 0 {
				if fns[len(fns)-1] != machine.FnRetFromFork {
					t.Errorf("task trace does not end at ret_from_fork: %v", fns)
				}
				continue
			}
			seen++
			if i != len(fns)-1 {
				t.Errorf("IRQ trace not cut after handle_arch_irq: %v", fns)
			}
		}
	}
	if seen == 0 {
		t.Error("no allocation in IRQ context was recorded")
	}
}

// TestQuarantine: an object is reused only after QuarantineSize later
// frees; an access to it while it waits is a use-after-free, and after
// reuse the access is valid.
func TestQuarantine(t *testing.T) {
	s, err := newSlab(nil)
	if err != nil {
		t.Fatal(err)
	}
	first, err := s.alloc(40, track{pid: 1})
	if err != nil {
		t.Fatal(err)
	}
	_, _, o, ok := s.find(first + 8)
	if !ok || o.state != stateAllocated {
		t.Fatalf("find(%#x) = %v, %v", first+8, ok, o)
	}
	s.release(first, o, track{pid: 2})
	for i := range QuarantineSize {
		a, err := s.alloc(40, track{pid: 3})
		if err != nil {
			t.Fatal(err)
		}
		if a == first {
			t.Fatalf("object reused after %d frees, while in quarantine", i)
		}
		_, _, ob, _ := s.find(a)
		s.release(a, ob, track{pid: 3})
	}
	_, _, o, _ = s.find(first) // the objects array may have moved
	if o.state != stateFreed || o.free.pid != 2 {
		t.Fatalf("quarantined object state %v free pid %d", o.state, o.free.pid)
	}
	// first has left quarantine: the next allocation of its cache reuses it.
	a, err := s.alloc(33, track{pid: 4})
	if err != nil {
		t.Fatal(err)
	}
	_, _, o, _ = s.find(first)
	if a != first || o.state != stateAllocated || o.alloc.pid != 4 || o.free.pid != 0 {
		t.Errorf("after quarantine: got %#x (want %#x), state %v, tracks %+v %+v", a, first, o.state, o.alloc, o.free)
	}
	if _, err := s.alloc(4096, track{}); err == nil {
		t.Error("alloc of 4096 bytes succeeded; no cache is that big")
	}
	if _, _, _, ok := s.find(0x1234); ok {
		t.Error("find of a non-slab address succeeded")
	}
}

func TestParseRecord(t *testing.T) {
	for _, r := range Records {
		got, err := ParseRecord(r.String())
		if err != nil || got != r {
			t.Errorf("ParseRecord(%q) = %v, %v", r.String(), got, err)
		}
	}
	if _, err := ParseRecord("dwarf"); err == nil {
		t.Error("ParseRecord(dwarf) succeeded")
	}
}

// FuzzRun runs short random workloads with fuzzed parameters: the model
// must never fail and a bug-free workload must never report.
func FuzzRun(f *testing.F) {
	f.Add(uint64(1), uint8(25), uint8(5), uint8(20), uint8(1), false)
	f.Add(uint64(7), uint8(100), uint8(100), uint8(100), uint8(2), true)
	f.Fuzz(func(t *testing.T, seed uint64, irq, sdei, sw, rec uint8, pac bool) {
		s, err := New(Config{Record: Records[int(rec)%len(Records)], PAC: pac, Policy: scs.Policies[int(seed%3)]})
		if err != nil {
			t.Fatal(err)
		}
		w := Workload{Ops: 60, Seed: seed, IRQ: int(irq % 101), SDEI: int(sdei % 101), Switch: int(sw % 101), MaxLive: 8}
		if err := s.Run(w); err != nil {
			t.Fatalf("%+v: %v", w, err)
		}
		if n := len(s.Reports()); n != 0 {
			t.Fatalf("%+v: %d reports:\n%s", w, n, s.Reports()[0].String())
		}
	})
}
