package kernel

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/unwindkit/unwindkit/fp"
	"github.com/unwindkit/unwindkit/ptrauth"
	"github.com/unwindkit/unwindkit/unwind/vmcore"
)

// The synthetic live kernel: one task_struct and its 16 KiB stack in
// memory the test owns, read under a lock one ReadVirt at a time (as
// /proc/kcore copies each read), changed between reads by a writer.
const (
	liveTask  = 0xffff000010000000 // task_struct
	liveStack = 0xffff800010000000 // task->stack, THREAD_SIZE aligned
	liveSize  = 16 << 10
	offStack  = 32
	offCtx    = 1024 // thread.cpu_context
	offNvcsw  = 2048
	offNivcsw = 2056
	offOnCPU  = 2064
)

type liveMem struct {
	mu    sync.Mutex
	task  [4096]byte
	stack [liveSize]byte
	reads int
	// hook runs (under the lock) before read number reads+1 is served.
	hook func(m *liveMem, n int)
}

func (m *liveMem) at(va uint64) ([]byte, bool) {
	switch {
	case va >= liveTask && va < liveTask+uint64(len(m.task)):
		return m.task[va-liveTask:], true
	case va >= liveStack && va < liveStack+liveSize:
		return m.stack[va-liveStack:], true
	}
	return nil, false
}

func (m *liveMem) ReadVirt(b []byte, va uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reads++
	if m.hook != nil {
		m.hook(m, m.reads)
	}
	src, ok := m.at(va)
	if !ok || len(src) < len(b) {
		return fmt.Errorf("va %#x: %w", va, vmcore.ErrNotMapped)
	}
	copy(b, src)
	return nil
}

// put64 writes a word; the caller holds mu.
func (m *liveMem) put64(va, v uint64) {
	b, ok := m.at(va)
	if !ok {
		panic(fmt.Sprintf("put64 %#x", va))
	}
	binary.LittleEndian.PutUint64(b, v)
}

func (m *liveMem) get64(va uint64) uint64 {
	b, _ := m.at(va)
	return binary.LittleEndian.Uint64(b)
}

// liveChain is one moment of the task: blocked with cpu_context {fp, pc}
// and frame records at recs, each returning to pcs[i+1].
type liveChain struct {
	pcs  []uint64
	recs []uint64 // addresses of the records, increasing
}

var ptRegs = fp.PtRegsLayout{Size: 336, X29: 29 * 8, PC: 256, StackFrame: 304}

// finalRecord is &task_pt_regs(task)->stackframe.
func finalRecord() uint64 { return liveStack + liveSize - ptRegs.Size + ptRegs.StackFrame }

// mkChain returns a liveChain of n frames whose pcs start at base (distinct
// per liveChain: a walk mixing two chains has pcs of both) with records
// spaced by gap from lo.
func mkChain(base uint64, n int, lo, gap uint64) liveChain {
	c := liveChain{}
	for i := range n {
		c.pcs = append(c.pcs, base+uint64(i)*0x40)
	}
	for i := range n - 1 {
		c.recs = append(c.recs, lo+uint64(i)*gap)
	}
	return c
}

// writeRecords writes c's frame records one at a time, calling between
// (without the lock held) after each.
func (m *liveMem) writeRecords(c liveChain, between func()) {
	for i, r := range c.recs {
		next := finalRecord()
		if i+1 < len(c.recs) {
			next = c.recs[i+1]
		}
		m.mu.Lock()
		m.put64(r, next)
		m.put64(r+8, c.pcs[i+1])
		m.mu.Unlock()
		between()
	}
}

// switchIn and switchOut model the scheduler: on_cpu set while it runs;
// on the way out cpu_context is saved and nvcsw counted.
func (m *liveMem) switchIn() {
	m.mu.Lock()
	binary.LittleEndian.PutUint32(m.task[offOnCPU:], 1)
	m.mu.Unlock()
}

func (m *liveMem) switchOut(c liveChain) {
	m.mu.Lock()
	m.put64(liveTask+offCtx+80, c.recs[0])
	m.put64(liveTask+offCtx+88, c.recs[0]-16)
	m.put64(liveTask+offCtx+96, c.pcs[0])
	m.put64(liveTask+offNvcsw, m.get64(liveTask+offNvcsw)+1)
	binary.LittleEndian.PutUint32(m.task[offOnCPU:], 0)
	m.mu.Unlock()
}

func newLiveMem(c liveChain) *liveMem {
	m := &liveMem{}
	m.put64(liveTask+offStack, liveStack)
	m.writeRecords(c, func() {})
	m.switchOut(c)
	return m
}

func newLiveKernel(t testing.TB, m Memory) *Kernel {
	l, err := ptrauth.NewLayoutHalves(ptrauth.Half{VABits: 48, TBI: true}, ptrauth.Half{VABits: 48}, ptrauth.PAuth2)
	if err != nil {
		t.Fatal(err)
	}
	return &Kernel{V: &vmcore.Vmcore{Path: "synthetic live", Layout: l}, ABI: fp.ABIFinalRecord, Regs: ptRegs, ThreadSize: liveSize, mem: m,
		off: map[string]uint64{"task_struct.stack": offStack, "task_struct.thread.cpu_context": offCtx,
			"cpu_context.fp": 80, "cpu_context.sp": 88, "cpu_context.pc": 96,
			"task_struct.nvcsw": offNvcsw, "task_struct.nivcsw": offNivcsw, "task_struct.on_cpu": offOnCPU}}
}

func pcsOf(r LiveResult) []uint64 {
	var out []uint64
	for _, f := range r.Frames {
		out = append(out, f.PC)
	}
	return out
}

// The two moments the tests switch between: distinct pcs, records at
// different places (B's deeper and denser), so that any mix of the two
// is neither.
var (
	chainA = mkChain(0xffff800008100000, 6, liveStack+0x3000, 0x100)
	chainB = mkChain(0xffff800008200000, 9, liveStack+0x2e00, 0x60)
)

// TestLiveWalkQuiet checks that a task that does not run is walked
// consistently at the first attempt, with its liveChain.
func TestLiveWalkQuiet(t *testing.T) {
	m := newLiveMem(chainA)
	k := newLiveKernel(t, m)
	r := k.TaskWalkLive(Task{Addr: liveTask, PID: 7}, 0)
	if !r.Consistent || r.Attempts != 1 || r.OnCPU || r.Err != nil || r.End != fp.EndFinal || !slices.Equal(pcsOf(r), chainA.pcs) {
		t.Fatalf("%+v: pcs %#x, want %#x consistent at once", r, pcsOf(r), chainA.pcs)
	}
	if r.State.Switches != 1 || r.Task.FP != chainA.recs[0] || r.Task.PC != chainA.pcs[0] {
		t.Errorf("state %+v, task %+v", r.State, r.Task)
	}
}

// TestLiveWalkDetects checks each rule with a change made at a chosen
// read: the task switched out during the walk (counts and context
// changed), a frame record changed with no switch counted (only the
// re-read catches it), a task on a CPU, and a task that runs at every
// attempt (reported after the bounded number of attempts).
func TestLiveWalkDetects(t *testing.T) {
	// Reads of one attempt: liveState 3 (cpu_context, the switch
	// counts, on_cpu), task->stack 1, the stack 4 chunks (reads 5-8),
	// the final record 9, liveState 10-12, the records again 13.
	const stackRead = 5 // the stack's first chunk is read at read 5
	ran := func(m *liveMem, n int) {
		if n == stackRead+2 { // mid-walk: the task ran and blocked elsewhere
			// (done without the lock: the hook holds it)
			for i, r := range chainB.recs {
				next := finalRecord()
				if i+1 < len(chainB.recs) {
					next = chainB.recs[i+1]
				}
				m.put64(r, next)
				m.put64(r+8, chainB.pcs[i+1])
			}
			m.put64(liveTask+offCtx+80, chainB.recs[0])
			m.put64(liveTask+offCtx+96, chainB.pcs[0])
			m.put64(liveTask+offNvcsw, m.get64(liveTask+offNvcsw)+1)
		}
	}
	for _, c := range []struct {
		name       string
		hook       func(m *liveMem, n int)
		attempts   int
		consistent bool
		onCPU      bool
		pcs        []uint64
		why        string
	}{
		{"switched during the walk", ran, 2, true, false, chainB.pcs, "switched out 1 time(s)"},
		{"record changed, no switch counted", func(m *liveMem, n int) {
			if n == stackRead+8 { // after the stack was read, before the records are read again
				m.put64(chainA.recs[2]+8, 0xffff800008300000)
			}
		}, 2, true, false, []uint64{chainA.pcs[0], chainA.pcs[1], chainA.pcs[2], 0xffff800008300000, chainA.pcs[4], chainA.pcs[5]}, "frame record at"},
		{"on a CPU", func(m *liveMem, n int) {
			binary.LittleEndian.PutUint32(m.task[offOnCPU:], 1)
		}, 2, false, true, chainA.pcs, "on a CPU"},
		{"runs at every attempt", func(m *liveMem, n int) {
			m.put64(liveTask+offNvcsw, m.get64(liveTask+offNvcsw)+1) // switched out between any two reads
		}, DefaultLiveAttempts, false, false, chainA.pcs, "switched out"},
	} {
		m := newLiveMem(chainA)
		m.hook = c.hook
		k := newLiveKernel(t, m)
		r := k.TaskWalkLive(Task{Addr: liveTask, PID: 7}, 0)
		if r.Attempts != c.attempts || r.Consistent != c.consistent || r.OnCPU != c.onCPU || !slices.Equal(pcsOf(r), c.pcs) ||
			len(r.Why) != r.Attempts-btoi(r.Consistent) || !strings.Contains(strings.Join(r.Why, "; "), c.why) {
			t.Errorf("%s: attempts %d consistent %v on cpu %v, pcs %#x, why %q; want %d %v %v %#x %q",
				c.name, r.Attempts, r.Consistent, r.OnCPU, pcsOf(r), r.Why, c.attempts, c.consistent, c.onCPU, c.pcs, c.why)
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestLiveWalkWriter runs the task in a writer goroutine while the
// reader walks it: the writer switches the task in, rewrites its stack
// one record at a time (yielding between, so that reads land mid-write),
// and switches it out, alternating between two chains with distinct pcs.
// Every walk reported Consistent must be exactly one of the two chains;
// a walk that is not must say why. Run under -race with the lock as the
// only synchronisation.
func TestLiveWalkWriter(t *testing.T) {
	m := newLiveMem(chainA)
	k := newLiveKernel(t, m)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		cur := chainA
		for {
			select {
			case <-stop:
				return
			default:
			}
			if slices.Equal(cur.pcs, chainA.pcs) {
				cur = chainB
			} else {
				cur = chainA
			}
			m.switchIn()
			m.writeRecords(cur, runtime.Gosched)
			m.switchOut(cur)
			runtime.Gosched()
		}
	}()
	consistent, not := 0, 0
	for range 2000 {
		r := k.TaskWalkLive(Task{Addr: liveTask, PID: 7}, 3)
		got := pcsOf(r)
		if r.Consistent {
			consistent++
			if !slices.Equal(got, chainA.pcs) && !slices.Equal(got, chainB.pcs) || r.Err != nil {
				t.Fatalf("consistent walk of a mixed stack: %#x (%v) after %d attempts, why %q", got, r.Err, r.Attempts, r.Why)
			}
			continue
		}
		not++
		if len(r.Why) == 0 || r.Attempts < 2 && !r.OnCPU {
			t.Fatalf("inconsistent walk without a reason: %+v", r)
		}
	}
	close(stop)
	<-done
	// Quiet again: consistent at once, and the liveChain last written.
	r := k.TaskWalkLive(Task{Addr: liveTask, PID: 7}, 1)
	last := chainA.pcs
	if m.get64(liveTask+offCtx+96) == chainB.pcs[0] {
		last = chainB.pcs
	}
	if !r.Consistent || !slices.Equal(pcsOf(r), last) {
		t.Errorf("after the writer stopped: %+v", r)
	}
	t.Logf("2000 walks under a writer: %d consistent, %d reported inconsistent", consistent, not)
}
