package slab

import (
	"errors"
	"fmt"
	"slices"

	"github.com/unwindkit/unwindkit/depot"
	"github.com/unwindkit/unwindkit/unwind"
	"github.com/unwindkit/unwindkit/unwind/machine"
)

// Config configures a Sim.
type Config struct {
	// Record is how kmalloc and kfree record their stack.
	Record Record
	// PAC signs return addresses (pac-ret) on the modelled machine.
	PAC bool
	// Policy is the shadow call stack entry policy.
	Policy machine.Policy
	// CPUs is the number of modelled CPUs (default 2).
	CPUs int
	// DeepPath, when positive, declares one more allocation path below
	// netd's entry: that many functions (initcall_01, initcall_02, ...)
	// then kmalloc. RecordBench(false) records there, so that a recording
	// can be given the depth of a real workload's (examples/kasan -boot).
	DeepPath int
}

// A path is a chain of calls below a context's base function, ending in
// the function that does the action.
type path []string

// Task code paths, below each task's entry function.
var (
	netdAlloc = path{"napi_poll", "netif_receive_skb", "__netif_receive_skb_core", "ip_rcv", "ip_local_deliver",
		"tcp_v4_rcv", "tcp_data_queue", "__alloc_skb", "kmalloc"}
	netdFree = path{"napi_poll", "netif_receive_skb", "__netif_receive_skb_core", "ip_rcv", "consume_skb",
		"skb_release_data", "kfree"}
	netdRead = path{"napi_poll", "netif_receive_skb", "__netif_receive_skb_core", "ip_rcv", "skb_copy_bits"}

	writerAlloc = path{"el0_svc_common", "invoke_syscall", "__arm64_sys_write", "ksys_write", "vfs_write",
		"seq_write", "seq_buf_alloc", "kvmalloc_node", "kmalloc"}
	writerFree = path{"el0_svc_common", "invoke_syscall", "__arm64_sys_close", "__fput", "seq_release", "kfree"}
	writerRead = path{"el0_svc_common", "invoke_syscall", "__arm64_sys_read", "ksys_read", "vfs_read",
		"seq_read", "copy_to_user_buf"}

	kworkerAlloc = path{"process_one_work", "flush_to_ldisc", "tty_buffer_alloc", "kmalloc"}
	kworkerFree  = path{"process_one_work", "rcu_core", "rcu_do_batch", "kfree_rcu_work", "kfree"}
	kworkerRead  = path{"process_one_work", "flush_to_ldisc", "n_tty_receive_buf"}

	// Below handle_arch_irq.
	irqAlloc = path{"gic_handle_irq", "handle_irq_desc", "timer_interrupt", "hrtimer_run_queues",
		"hrtimer_alloc_event", "kmalloc"}
	irqFree = path{"gic_handle_irq", "handle_irq_desc", "net_tx_action", "dev_kfree_skb_irq", "kfree"}

	// Below __sdei_handler.
	sdeiRead = path{"sdei_event_handler", "ghes_notify_sdei", "ghes_in_nmi_queue_one_entry", "ghes_read_estatus"}
)

type taskSpec struct {
	name, entry        string
	pid                uint32
	alloc, free, read  path
	allocSize, maxLive int
}

var taskSpecs = []taskSpec{
	{name: "netd", entry: "net_rx_thread", pid: 412, alloc: netdAlloc, free: netdFree, read: netdRead, allocSize: 256},
	{name: "writer", entry: "el0_svc", pid: 1337, alloc: writerAlloc, free: writerFree, read: writerRead, allocSize: 64},
	{name: "kworker/0:1", entry: "worker_thread", pid: 37, alloc: kworkerAlloc, free: kworkerFree, read: kworkerRead, allocSize: 128},
	{name: "kworker/1:2", entry: "worker_thread", pid: 88, alloc: kworkerAlloc, free: kworkerFree, read: kworkerRead, allocSize: 32},
}

// funcs declares every function of the paths, in a stable order, each
// with call sites for exactly the functions that follow it, directly or
// not, on some path (the random workload leaves out some intermediate
// calls; the machine adds stack_trace_save).
func funcs(deep path) []machine.Func {
	index := map[string]int{}
	var fs []machine.Func
	declare := func(n string) int {
		i, ok := index[n]
		if !ok {
			i = len(fs)
			index[n] = i
			fs = append(fs, machine.Func{Name: n, Locals: 16 * (len(n) % 4), Calls: []string{}})
		}
		return i
	}
	chain := func(base string, p path) {
		full := p
		if base != "" {
			full = append(path{base}, p...)
		}
		for _, n := range full {
			declare(n)
		}
		for i, caller := range full {
			ci := index[caller]
			for j, callee := range full[i+1:] {
				if i == 0 && base != "" && j > 0 {
					break // the entry function calls only the path's first
				}
				if !slices.Contains(fs[ci].Calls, callee) {
					fs[ci].Calls = append(fs[ci].Calls, callee)
				}
			}
		}
	}
	if len(deep) > 0 {
		chain(taskSpecs[0].entry, deep)
	}
	for _, t := range taskSpecs {
		chain(t.entry, t.alloc)
		chain(t.entry, t.free)
		chain(t.entry, t.read)
	}
	// handle_arch_irq and __sdei_handler are built-ins that call every
	// declared function.
	chain("", irqAlloc)
	chain("", irqFree)
	chain("", sdeiRead)
	return fs
}

// Sim is a modelled arm64 machine running the KASAN workload.
type Sim struct {
	cfg     Config
	m       *machine.Machine
	sym     *unwind.Symbolizer
	method  unwind.Method
	opts    machine.SaveOptions
	slab    *Slab
	tasks   []*machine.Task
	specs   []taskSpec
	running []int // task index running on each CPU, -1 for none
	buf     [StackDepth]uint64
	src     unwind.Source // reused by every recording: SourceInto fills it in place
	live    []uint64      // live objects the workload may free or read
	// taskPath and irqPath hold the random workload's current paths.
	taskPath, irqPath path
	deepPath          path // Config.DeepPath's path, or nil
	reports           []Report
	unwindEr          int
	stats             Stats
}

// Stats counts what a Sim has done.
type Stats struct {
	Allocs, Frees, Reads, IRQs, SDEIs, Switches int
	// UnwindErrors counts recordings that ended with an error (frames so
	// far are still stored).
	UnwindErrors int
}

// New builds the machine, its tasks and the allocator.
func New(cfg Config) (*Sim, error) {
	if cfg.CPUs == 0 {
		cfg.CPUs = 2
	}
	mc := machine.DefaultConfig()
	mc.NumCPU = cfg.CPUs
	mc.PAC = cfg.PAC
	mc.Policy = cfg.Policy
	mc.KASAN = true
	var deep path
	if cfg.DeepPath > 0 {
		for i := range cfg.DeepPath {
			deep = append(deep, fmt.Sprintf("initcall_%02d", i+1))
		}
		deep = append(deep, "kmalloc")
	}
	mc.Funcs = funcs(deep)
	m, err := machine.New(mc)
	if err != nil {
		return nil, err
	}
	s := &Sim{cfg: cfg, m: m, sym: m.Symbolizer(), deepPath: deep}
	switch cfg.Record {
	case RecordSCS:
		s.method = unwind.MethodSCS
		// The seed patch's copy stops at the first context boundary
		// itself; the depot's filter cuts at the same place.
		s.opts.StopAtBoundary = true
	case RecordFP:
		s.method = unwind.MethodFP
	}
	s.slab, err = newSlab(IRQEntryFilter(s.sym))
	if err != nil {
		return nil, err
	}
	for _, ts := range taskSpecs {
		t, err := m.NewTask(ts.name, ts.entry)
		if err != nil {
			return nil, err
		}
		s.tasks = append(s.tasks, t)
		s.specs = append(s.specs, ts)
	}
	s.running = make([]int, cfg.CPUs)
	for i := range s.running {
		s.running[i] = -1
	}
	return s, nil
}

// IRQEntryFilter returns the depot filter KASAN uses (filter_irq_stacks):
// cut each trace after its first frame in the IRQ-entry text, here the
// model's hard-IRQ entry functions (the vector, el1h_64_irq_handler,
// call_on_irq_stack and handle_arch_irq, which stands for gic_handle_irq's
// __irq_entry section). SDEI handlers are not IRQ-entry text in the kernel,
// so they are not in the filter either.
func IRQEntryFilter(sym *unwind.Symbolizer) func(uint64) bool {
	var starts, ends []uint64
	for _, s := range sym.Symbols() {
		switch s.Name {
		case machine.FnIRQVector, machine.FnIRQHandler, machine.FnCallOnIRQStack, machine.FnHandleIRQ:
			starts = append(starts, s.Addr)
			ends = append(ends, s.Addr+s.Size)
		}
	}
	return depot.EntryText(starts, ends)
}

// Machine returns the modelled machine.
func (s *Sim) Machine() *machine.Machine { return s.m }

// Slab returns the allocator.
func (s *Sim) Slab() *Slab { return s.slab }

// Reports returns the reports so far.
func (s *Sim) Reports() []Report { return s.reports }

// Stats returns the counters.
func (s *Sim) Stats() Stats { st := s.stats; st.UnwindErrors = s.unwindEr; return st }

// PID returns the pid of the named task.
func PID(task string) uint32 {
	for _, t := range taskSpecs {
		if t.name == task {
			return t.pid
		}
	}
	return 0
}

// run switches cpu to task ti (if it is not running there).
func (s *Sim) run(cpu, ti int) error {
	if s.running[cpu] == ti {
		return nil
	}
	for c, r := range s.running {
		if r == ti && c != cpu {
			return fmt.Errorf("slab: task %s is running on cpu%d", s.specs[ti].name, c)
		}
	}
	if err := s.m.CPU(cpu).Switch(s.tasks[ti]); err != nil {
		return err
	}
	s.running[cpu] = ti
	s.stats.Switches++
	return nil
}

func (s *Sim) current(cpu int) taskSpec { return s.specs[s.running[cpu]] }

// along calls down p on cpu, runs at, then returns all the way back.
func (s *Sim) along(cpu int, p path, at func() error) error {
	c := s.m.CPU(cpu)
	for i, fn := range p {
		if err := c.Call(fn); err != nil {
			for ; i > 0; i-- {
				c.Return()
			}
			return err
		}
	}
	err := at()
	for range p {
		if rerr := c.Return(); rerr != nil && err == nil {
			err = rerr
		}
	}
	return err
}

// record is kasan_save_stack: an unwinder inlined in the current function
// (kmalloc or kfree) saves the trace into the depot.
func (s *Sim) record(cpu int) (depot.Handle, error) {
	if s.cfg.Record == RecordNone {
		return 0, nil
	}
	h, err := s.m.CPU(cpu).SaveToDepot(s.slab.Depot, s.method, s.buf[:], s.opts)
	if errors.Is(err, unwind.ErrInterruptedTopHidden) || errors.Is(err, unwind.ErrCorrupt) {
		// A walk that fails part-way keeps what it had, as the kernel's
		// (SaveToDepot stored it).
		s.unwindEr++
		err = nil
	}
	return h, err
}

// kmalloc is the action at the end of an allocation path.
func (s *Sim) kmalloc(cpu, size int) (uint64, error) {
	h, err := s.record(cpu)
	if err != nil {
		return 0, err
	}
	addr, err := s.slab.alloc(size, track{pid: s.current(cpu).pid, stack: h})
	if err != nil {
		return 0, err
	}
	s.stats.Allocs++
	return addr, nil
}

// kfree is the action at the end of a free path: a double free is
// reported, otherwise the free track is recorded and the object
// quarantined.
func (s *Sim) kfree(cpu int, addr uint64) error {
	_, _, o, ok := s.slab.find(addr)
	if !ok {
		return fmt.Errorf("slab: kfree of %#x, not a slab object", addr)
	}
	if o.state != stateAllocated {
		// The report names kfree's caller (_RET_IP_ of kfree).
		return s.report(cpu, "double-free", addr, 0, false, machine.Inline)
	}
	h, err := s.record(cpu)
	if err != nil {
		return err
	}
	s.slab.release(addr, o, track{pid: s.current(cpu).pid, stack: h})
	s.stats.Frees++
	return nil
}

// access is an instrumented load or store (__asan_loadN / __asan_storeN,
// out-of-line calls from the current function).
func (s *Sim) access(cpu int, addr uint64, size int, write bool) error {
	s.stats.Reads++
	_, _, o, ok := s.slab.find(addr)
	if !ok {
		return fmt.Errorf("slab: access to %#x, not a slab object", addr)
	}
	if o.state == stateAllocated {
		return nil
	}
	return s.report(cpu, "use-after-free", addr, size, write, machine.OutOfLine)
}

// report builds a KASAN report for addr at the CPU's current function.
// The call trace is a full frame-pointer walk (dump_stack); with inv
// OutOfLine its first frame is the call site in the current function (the
// _RET_IP_ of __asan_loadN), Inline it is the current function's caller
// (_RET_IP_ of kfree).
func (s *Sim) report(cpu int, kind string, addr uint64, size int, write bool, inv machine.Invocation) error {
	c := s.m.CPU(cpu)
	var trace [128]uint64
	n, err := c.Unwind(unwind.MethodFP, inv, trace[:], machine.SaveOptions{})
	if err != nil {
		return fmt.Errorf("slab: call trace for report: %w", err)
	}
	cache, idx, o, ok := s.slab.find(addr)
	if !ok {
		return fmt.Errorf("slab: report for %#x, not a slab object", addr)
	}
	ci := int((addr - cacheBase) >> 32)
	cur := s.current(cpu)
	r := Report{
		Kind: kind, Addr: addr, Size: size, Write: write,
		Task: cur.name, PID: cur.pid, CPU: cpu,
		AllocPID: o.alloc.pid, FreePID: o.free.pid,
		Cache: cache.name, ObjSize: cache.size,
		Object: s.slab.objAddr(ci, idx),
	}
	for _, pc := range trace[:n] {
		r.CallTrace = append(r.CallTrace, symbolize(s.sym, pc))
	}
	if n > 0 {
		r.Where = r.CallTrace[0]
	}
	var err2 error
	if r.Alloc, err2 = s.fetch(o.alloc.stack); err2 != nil {
		return err2
	}
	if r.Free, err2 = s.fetch(o.free.stack); err2 != nil {
		return err2
	}
	s.reports = append(s.reports, r)
	return nil
}

func (s *Sim) fetch(h depot.Handle) ([]string, error) {
	if h == 0 {
		return nil, nil
	}
	pcs, err := s.slab.Depot.Fetch(h, nil)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(pcs))
	for i, pc := range pcs {
		out[i] = symbolize(s.sym, pc)
	}
	return out, nil
}
