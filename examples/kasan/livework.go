package main

import (
	"sync"
	"sync/atomic"
)

// The live workload: the model's tasks as goroutines running Go functions
// named after the model's kernel functions; an "irq" goroutine allocates
// and frees like the model's hard IRQs. Objects move through a shared pool,
// so one task frees what another allocated.

// Task ids of the live workload (the model's pids; the IRQ goroutine is
// swapper/0, pid 0, as an IRQ on an idle CPU).
const (
	pidNetd    = 412
	pidWriter  = 1337
	pidKworker = 37
	pidIRQ     = 0
)

type liveWork struct {
	t      *liveTracker
	mu     sync.Mutex
	pool   []*liveObj
	allocs atomic.Int64
	frees  atomic.Int64
	reads  atomic.Int64
}

func (w *liveWork) put(o *liveObj) {
	w.mu.Lock()
	w.pool = append(w.pool, o)
	w.mu.Unlock()
}

func (w *liveWork) get() *liveObj {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.pool) == 0 {
		return nil
	}
	o := w.pool[len(w.pool)-1]
	w.pool = w.pool[:len(w.pool)-1]
	return o
}

// runLive runs the workload with iters allocations per goroutine (netd,
// writer, two kworkers and the irq goroutine) and returns it.
func runLive(t *liveTracker, iters int) *liveWork {
	w := &liveWork{t: t}
	var wg sync.WaitGroup
	wg.Go(func() { netRxThread(w, iters) })
	wg.Go(func() { el0Svc(w, iters) })
	wg.Go(func() { workerThread(w, iters) })
	wg.Go(func() { workerThread(w, iters) })
	wg.Go(func() { handleArchIRQ(w, iters) })
	wg.Wait()
	return w
}

//go:noinline
func kmalloc(w *liveWork, task uint32, size int) *liveObj {
	w.allocs.Add(1)
	return w.t.alloc(task, size)
}

//go:noinline
func kfree(w *liveWork, task uint32, o *liveObj) {
	if !o.freed.Load() {
		w.frees.Add(1)
	}
	w.t.release(task, o)
}

// kasanCheck is __asan_load8: the access check.
//
//go:noinline
func kasanCheck(w *liveWork, task uint32, o *liveObj) byte {
	w.reads.Add(1)
	w.t.check(task, o)
	return o.data[0]
}

// netd.

//go:noinline
func netRxThread(w *liveWork, iters int) {
	for range iters {
		o := napiPoll(w)
		w.put(o)
	}
}

//go:noinline
func napiPoll(w *liveWork) *liveObj {
	o := netifReceiveSkb(w)
	ipRcvRead(w, o)
	return o
}

//go:noinline
func netifReceiveSkb(w *liveWork) *liveObj { return ipRcv(w) }

//go:noinline
func ipRcv(w *liveWork) *liveObj { return tcpDataQueue(w) }

//go:noinline
func tcpDataQueue(w *liveWork) *liveObj { return allocSkb(w) }

//go:noinline
func allocSkb(w *liveWork) *liveObj { return kmalloc(w, pidNetd, 256) }

//go:noinline
func ipRcvRead(w *liveWork, o *liveObj) byte { return skbCopyBits(w, pidNetd, o) }

//go:noinline
func skbCopyBits(w *liveWork, task uint32, o *liveObj) byte { return kasanCheck(w, task, o) }

// writer.

//go:noinline
func el0Svc(w *liveWork, iters int) {
	for range iters {
		invokeSyscallWrite(w)
		invokeSyscallClose(w)
	}
}

//go:noinline
func invokeSyscallWrite(w *liveWork) { w.put(ksysWrite(w)) }

//go:noinline
func ksysWrite(w *liveWork) *liveObj { return vfsWrite(w) }

//go:noinline
func vfsWrite(w *liveWork) *liveObj { return seqBufAlloc(w) }

//go:noinline
func seqBufAlloc(w *liveWork) *liveObj { return kmalloc(w, pidWriter, 64) }

//go:noinline
func invokeSyscallClose(w *liveWork) {
	if o := w.get(); o != nil {
		ksysClose(w, o)
	}
}

//go:noinline
func ksysClose(w *liveWork, o *liveObj) { seqRelease(w, o) }

//go:noinline
func seqRelease(w *liveWork, o *liveObj) { kfree(w, pidWriter, o) }

// kworker.

//go:noinline
func workerThread(w *liveWork, iters int) {
	for range iters {
		processOneWork(w)
	}
}

//go:noinline
func processOneWork(w *liveWork) {
	w.put(flushToLdisc(w))
	if o := w.get(); o != nil {
		rcuDoBatch(w, o)
	}
}

//go:noinline
func flushToLdisc(w *liveWork) *liveObj { return ttyBufferAlloc(w) }

//go:noinline
func ttyBufferAlloc(w *liveWork) *liveObj { return kmalloc(w, pidKworker, 128) }

//go:noinline
func rcuDoBatch(w *liveWork, o *liveObj) { kfreeRcuWork(w, o) }

//go:noinline
func kfreeRcuWork(w *liveWork, o *liveObj) { kfree(w, pidKworker, o) }

// irq.

//go:noinline
func handleArchIRQ(w *liveWork, iters int) {
	for range iters {
		gicHandleIRQ(w)
	}
}

//go:noinline
func gicHandleIRQ(w *liveWork) {
	w.put(timerInterrupt(w))
	if o := w.get(); o != nil {
		netTxAction(w, o)
	}
}

//go:noinline
func timerInterrupt(w *liveWork) *liveObj { return hrtimerAllocEvent(w) }

//go:noinline
func hrtimerAllocEvent(w *liveWork) *liveObj { return kmalloc(w, pidIRQ, 96) }

//go:noinline
func netTxAction(w *liveWork, o *liveObj) { devKfreeSkbIRQ(w, o) }

//go:noinline
func devKfreeSkbIRQ(w *liveWork, o *liveObj) { kfree(w, pidIRQ, o) }

// liveBugs plants the demo's bugs, one after the other: netd reads an skb
// an IRQ freed (use-after-free), and writer frees a seq buffer twice.
func liveBugs(w *liveWork) {
	o := netifReceiveSkb(w)
	netTxAction(w, o)
	ipRcvRead(w, o)
	b := vfsWrite(w)
	seqRelease(w, b)
	seqRelease(w, b)
}
