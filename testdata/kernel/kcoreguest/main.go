// Command kcoreguest runs inside an arm64 guest (kcore.sh puts it, built
// static, in the initramfs): it starts a workload of hundreds of blocked
// threads in distinct kernel call chains (and child processes, tun reads
// in a module, pipes full and empty), then for several rounds walks every
// task of the running kernel from /proc/kcore (unwind/vmcore,
// unwind/kernel: Kernel.TaskWalkLive) and reads the kernel's own
// /proc/PID/stack (/proc/TGID/task/TID/stack for the other threads) right
// after, and classifies each comparison (internal/kcorecheck). The last
// round keeps what it reads (vmcore.KeepReads) and writes the pages it
// read as a trimmed /proc/kcore-format file. It prints the results, the
// snapshot and the symbols the walks named (gzip, base64) on stdout
// between @@BEGIN NAME and @@END NAME lines.
//
// It lives under testdata so the module never links it.
package main

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/unwindkit/unwindkit/internal/kcorecheck"
	"github.com/unwindkit/unwindkit/unwind/kernel"
	"github.com/unwindkit/unwindkit/unwind/vmcore"
)

var (
	rounds   = flag.Int("rounds", 4, "live rounds before the snapshot round")
	perChain = flag.Int("per-chain", 20, "threads per blocking call chain")
	name     = flag.String("name", "", "kernel name for the results")
	datasyms = flag.String("datasyms", "", "nm lines of data symbols to merge (kernels without CONFIG_KALLSYMS_ALL)")
	snapBTF  = flag.Bool("snapshot-btf", false, "the snapshot round reads the BTF again, so that the snapshot holds it (a kernel no shipped capture has)")
)

func main() {
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("kcoreguest: ")
	runtime.LockOSThread() // the reader: one thread, known by its tid
	reader := unix.Gettid()

	nth := workload(*perChain)
	log.Printf("workload: %d blocked threads started", nth)
	time.Sleep(3 * time.Second)

	syms := readSyms()
	v, err := vmcore.Open("/proc/kcore")
	if err != nil {
		log.Fatal(err)
	}
	t0 := time.Now()
	k, err := kernel.New(v, syms, kernel.Options{})
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("/proc/kcore: live %v, virtual %v, %s; kernel.New %v; BTF %v", v.Live, v.Virtual, v.Info.OSRelease, time.Since(t0), k.BTF != nil)
	for _, n := range k.Notes {
		log.Printf("note: %s", n)
	}
	res := kcorecheck.Results{Kernel: *name, Uname: uname()}
	for r := 1; r <= *rounds; r++ {
		res.Rounds = append(res.Rounds, round(k, nil, r, reader, &res))
	}
	// The snapshot round: a second reader of /proc/kcore keeping what it
	// reads (each byte as last read: a task walked consistently as its
	// walk saw it), its pages recorded. The state after /proc/PID/stack
	// is read by the first reader, so that it does not overwrite them.
	fv, err := vmcore.Open("/proc/kcore")
	if err != nil {
		log.Fatal(err)
	}
	opts := kernel.Options{BTF: k.BTF, BTFFrom: "the live reader", BTFBuild: k.Build()}
	if *snapBTF { // kernel.New's reads (the BTF) recorded too
		opts = kernel.Options{}
		fv.KeepReads(true)
		fv.RecordReads(true)
	}
	fk, err := kernel.New(fv, syms, opts)
	if err != nil {
		log.Fatal(err)
	}
	if !*snapBTF {
		fv.KeepReads(true)
		fv.RecordReads(true)
	}
	res.Rounds = append(res.Rounds, round(k, fk, *rounds+1, reader, &res))
	var snap bytes.Buffer
	if err := fv.WriteTrimmed(&snap, fv.PagesToRanges(fv.PagesRead())); err != nil {
		log.Fatal(err)
	}
	log.Printf("snapshot: %d pages, %d bytes", len(fv.PagesRead()), snap.Len())
	js, _ := json.MarshalIndent(&res, "", " ")
	emit("results.json.gz", js)
	emit("snapshot.kcore.gz", snap.Bytes())
	emit("ksyms.txt.gz", usedSyms(k, syms, &res))
	// The command on the same running kernel, while the workload runs.
	if _, err := os.Stat("/unwinddump"); err == nil {
		out, err := exec.Command("/unwinddump", "-tasks", "/proc/kcore").CombinedOutput()
		tun := strings.Count(string(out), " [tun]")
		log.Printf("unwinddump -tasks /proc/kcore: %v, %d bytes, %d tasks, %d frames in [tun], %d not read consistently", err, len(out),
			strings.Count(string(out), "\n== task pid "), tun, strings.Count(string(out), "live: not read consistently"))
		emit("unwinddump.txt.gz", out)
	}
	for _, rd := range res.Rounds {
		log.Printf("round %d: %d tasks, kcore %.3fs (+list %.3fs), proc %.3fs (+list %.3fs): %v, %d SCS copies checked", rd.N, rd.Tasks,
			float64(rd.KcoreNS)/1e9, float64(rd.ListNS)/1e9, float64(rd.ProcNS)/1e9, float64(rd.ProcDir)/1e9, rd.Counts, rd.SCSChecked)
	}
	fmt.Println("@@DONE")
}

// named are the functions of every frame walked.
var named = map[string]bool{}

// round walks every thread (through fk, the reader keeping its reads,
// when it is set, else k) and reads its /proc stack right after.
func round(k, fk *kernel.Kernel, n, reader int, res *kcorecheck.Results) kcorecheck.Round {
	walkK := k
	if fk != nil {
		walkK = fk
	}
	rd := kcorecheck.Round{N: n, Snapshot: fk != nil, Counts: map[string]int{}}
	t0 := time.Now()
	ts, err := walkK.Threads(0)
	rd.ListNS = time.Since(t0).Nanoseconds()
	if err != nil {
		log.Printf("round %d: threads: %v (%d read)", n, err, len(ts))
	}
	// The same tasks the /proc way: list every /proc/PID/task.
	t0 = time.Now()
	procTasks := 0
	if ds, err := os.ReadDir("/proc"); err == nil {
		for _, d := range ds {
			if _, err := strconv.Atoi(d.Name()); err == nil {
				if ts, err := os.ReadDir("/proc/" + d.Name() + "/task"); err == nil {
					procTasks += len(ts)
				}
			}
		}
	}
	rd.ProcDir = time.Since(t0).Nanoseconds()
	log.Printf("round %d: %d tasks in the task list, %d in /proc", n, len(ts), procTasks)
	for _, t := range ts {
		if t.PID == 0 {
			continue // the idle task has no /proc entry
		}
		c := kcorecheck.Comparison{Round: n, TID: t.PID, TGID: t.TGID, Comm: t.Comm, Snapshot: fk != nil}
		t1 := time.Now()
		lr := walkK.TaskWalkLive(t, 0)
		lines, perr := walkK.ProcStack(lr.Frames)
		rd.KcoreNS += time.Since(t1).Nanoseconds()
		if perr != nil {
			log.Fatal(perr)
		}
		c.Kcore = lines
		for _, f := range lr.Frames { // every frame's function, printed or not (for ksyms.txt.gz)
			for _, pc := range []uint64{f.PC, f.PC - 1} {
				if s, ok := walkK.Sym(pc); ok {
					named[s.Name] = true
				}
			}
		}
		if lr.Err != nil {
			c.KcoreErr = lr.Err.Error()
		}
		path := fmt.Sprintf("/proc/%d/task/%d/stack", t.TGID, t.PID)
		if t.TGID == t.PID {
			path = fmt.Sprintf("/proc/%d/stack", t.PID)
		}
		t2 := time.Now()
		b, err := os.ReadFile(path)
		rd.ProcNS += time.Since(t2).Nanoseconds()
		if err != nil {
			c.ProcErr = err.Error()
		} else {
			c.Proc = strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
			if len(b) == 0 {
				c.Proc = []string{}
			}
		}
		after, aerr := k.LiveState(t.Addr) // always the live memory
		kcorecheck.Classify(&c, lr, after, aerr, t.PID == reader)
		if err := kcorecheck.CompareSCS(&c, walkK, lr); err != nil {
			log.Fatal(err)
		}
		if c.SCSChecked {
			rd.SCSChecked++
			if p := kcorecheck.SCSProblem(c); p != "" {
				log.Printf("SCS UNEXPLAINED tid %d %s: %s: scs %q kcore %q", c.TID, c.Comm, p, c.SCS, c.Kcore)
			}
		}
		rd.Counts[c.Verdict]++
		rd.Tasks++
		res.Comparisons = append(res.Comparisons, c)
		if c.Verdict == kcorecheck.Unexplained {
			log.Printf("UNEXPLAINED tid %d %s: kcore %q (%v) proc %q", c.TID, c.Comm, c.Kcore, c.KcoreErr, c.Proc)
		}
	}
	return rd
}

func readSyms() []vmcore.KSym {
	f, err := os.Open("/proc/kallsyms")
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	syms, err := vmcore.ParseKallsyms(f)
	if err != nil {
		log.Fatal(err)
	}
	if *datasyms != "" {
		b, err := os.ReadFile(*datasyms)
		if err != nil {
			log.Fatal(err)
		}
		ds, err := vmcore.ParseKallsyms(bytes.NewReader(b))
		if err != nil {
			log.Fatal(err)
		}
		syms = kernel.MergeDataSyms(syms, ds)
	}
	return syms
}

// usedSyms returns the /proc/kallsyms lines a re-check needs: every
// function of a frame walked, every symbol a line of the results names (by address: the symbol of the
// frame's pc-1), its aliases, the symbol after it (its size), and the
// bounds and data symbols the unwinder reads.
func usedSyms(k *kernel.Kernel, syms []vmcore.KSym, res *kcorecheck.Results) []byte {
	want := map[string]bool{}
	for n := range named {
		want[n] = true
	}
	for _, c := range res.Comparisons {
		for _, ls := range [][]string{c.Kcore, c.Proc} {
			for _, l := range ls {
				f := strings.Fields(strings.TrimPrefix(l, "[<0>] "))
				if len(f) > 0 {
					fn, _, _ := strings.Cut(f[0], "+")
					want[fn] = true
				}
			}
		}
	}
	for _, s := range []string{"_text", "_stext", "_etext", "__sched_text_start", "__sched_text_end", "__lock_text_start",
		"__lock_text_end", "init_task", "__start_BTF", "__stop_BTF", "swapper_pg_dir", "__per_cpu_offset", "__entry_task",
		"irq_stack_ptr", "overflow_stack", "call_on_irq_stack", "cpu_switch_to", "ret_from_fork"} {
		want[s] = true
	}
	keep := map[int]bool{}
	for i, s := range syms {
		if !want[s.Name] {
			continue
		}
		keep[i] = true
		for j := i + 1; j < len(syms); j++ { // aliases and the next symbol (of the same module for a module's)
			if syms[j].Addr == s.Addr {
				keep[j] = true
				continue
			}
			if syms[j].Module == s.Module {
				keep[j] = true
				break
			}
		}
		for j := i - 1; j >= 0 && syms[j].Addr == s.Addr; j-- {
			keep[j] = true
		}
	}
	var idx []int
	for i := range keep {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	var b bytes.Buffer
	for _, i := range idx {
		s := syms[i]
		fmt.Fprintf(&b, "%016x %c %s", s.Addr, s.Type, s.Name)
		if s.Module != "" {
			fmt.Fprintf(&b, " [%s]", s.Module)
		}
		b.WriteByte('\n')
	}
	_ = k
	return b.Bytes()
}

func emit(name string, data []byte) {
	var z bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&z, gzip.BestCompression)
	zw.Write(data)
	zw.Close()
	fmt.Printf("@@BEGIN %s %d\n", name, z.Len())
	enc := base64.StdEncoding.EncodeToString(z.Bytes())
	for len(enc) > 76 {
		fmt.Println(enc[:76])
		enc = enc[76:]
	}
	fmt.Println(enc)
	fmt.Printf("@@END %s\n", name)
}

func uname() string {
	var u unix.Utsname
	unix.Uname(&u)
	c := func(b []byte) string { return string(bytes.TrimRight(b, "\x00")) }
	return c(u.Sysname[:]) + " " + c(u.Release[:]) + " " + c(u.Version[:]) + " " + c(u.Machine[:])
}

// --- the workload ------------------------------------------------------------------------------

// blocker blocks the calling (locked) thread in the kernel, forever.
type blocker struct {
	name string
	run  func(i int)
}

var futexWord uint32

func must(err error) {
	if err != nil {
		log.Fatal(err)
	}
}

// workload starts per threads in each chain and the child processes,
// and returns how many threads it started.
func workload(per int) int {
	must(os.MkdirAll("/tmp/w", 0o755))
	lockPath := "/tmp/w/lock"
	lf, err := os.Create(lockPath)
	must(err)
	keep = append(keep, lf)
	must(unix.Flock(int(lf.Fd()), unix.LOCK_EX)) // held: the flock waiters block
	must(unix.Mkfifo("/tmp/w/fifo", 0o644))
	// A kernel without CONFIG_NET (the SCS test kernels): socket(2) fails
	// with ENOSYS, and the socket chains are left out.
	ln, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	netOK := err == nil
	if netOK {
		must(unix.Bind(ln, &unix.SockaddrUnix{Name: "/tmp/w/sock"}))
		must(unix.Listen(ln, 1024))
	} else {
		log.Printf("no sockets: no accept, unix stream or dgram chains (%v)", err)
	}
	tunOK := true
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		log.Printf("no /dev/net/tun: no tun readers (%v)", err)
		tunOK = false
	}
	chains := []blocker{
		{"nanosleep", func(int) { unix.Nanosleep(&unix.Timespec{Sec: 1 << 30}, nil) }},
		{"clock_nanosleep abs", func(int) {
			ts := unix.Timespec{Sec: 1 << 40}
			unix.Syscall6(unix.SYS_CLOCK_NANOSLEEP, unix.CLOCK_MONOTONIC, 1, uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
		}},
		{"futex", func(int) {
			unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(&futexWord)), 0 /* FUTEX_WAIT */, 0, 0, 0, 0)
		}},
		{"pipe read", func(int) {
			var p [2]int
			must(unix.Pipe(p[:]))
			var b [1]byte
			unix.Read(p[0], b[:])
		}},
		{"pipe write full", func(int) {
			var p [2]int
			must(unix.Pipe(p[:]))
			b := make([]byte, 1<<20)
			for {
				if _, err := unix.Write(p[1], b); err != nil {
					return
				}
			}
		}},
		{"ppoll", func(int) {
			var p [2]int
			must(unix.Pipe(p[:]))
			unix.Ppoll([]unix.PollFd{{Fd: int32(p[0]), Events: unix.POLLIN}}, nil, nil)
		}},
		{"pselect", func(int) {
			var p [2]int
			must(unix.Pipe(p[:]))
			var set unix.FdSet
			set.Set(p[0])
			unix.Pselect(p[0]+1, &set, nil, nil, nil, nil)
		}},
		{"epoll_wait", func(int) {
			ep, err := unix.EpollCreate1(0)
			must(err)
			var ev [1]unix.EpollEvent
			unix.EpollWait(ep, ev[:], -1)
		}},
		{"eventfd read", func(int) {
			fd, err := unix.Eventfd(0, 0)
			must(err)
			var b [8]byte
			unix.Read(fd, b[:])
		}},
		{"timerfd read", func(int) {
			fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, 0)
			must(err)
			must(unix.TimerfdSettime(fd, 0, &unix.ItimerSpec{Value: unix.Timespec{Sec: 1 << 30}}, nil))
			var b [8]byte
			unix.Read(fd, b[:])
		}},
		{"fifo open", func(int) { unix.Open("/tmp/w/fifo", unix.O_RDONLY, 0) }},
		{"flock", func(int) {
			fd, err := unix.Open(lockPath, unix.O_RDWR, 0)
			must(err)
			unix.Flock(fd, unix.LOCK_EX)
		}},
		{"inotify read", func(int) {
			fd, err := unix.InotifyInit()
			must(err)
			unix.InotifyAddWatch(fd, "/tmp/w", unix.IN_ALL_EVENTS&^(unix.IN_ACCESS|unix.IN_OPEN|unix.IN_CLOSE_NOWRITE))
			b := make([]byte, 4096)
			unix.Read(fd, b)
		}},
		{"wait4", func(int) {
			cmd := exec.Command("/bin/sleep", "100000")
			if err := cmd.Start(); err != nil {
				return
			}
			var ws unix.WaitStatus
			unix.Wait4(cmd.Process.Pid, &ws, 0, nil)
		}},
	}
	if netOK {
		chains = append(chains, []blocker{
			{"accept", func(int) { unix.Accept(ln) }},
			{"unix stream read", func(int) {
				p, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
				must(err)
				var b [1]byte
				unix.Read(p[0], b[:])
			}},
			{"unix dgram recvfrom", func(int) {
				p, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM, 0)
				must(err)
				var b [1]byte
				unix.Recvfrom(p[0], b[:], 0)
			}},
		}...)
	}
	if tunOK {
		chains = append(chains, blocker{"tun read", func(i int) {
			fd, err := unix.Open("/dev/net/tun", unix.O_RDWR, 0)
			must(err)
			ifr, err := unix.NewIfreq(fmt.Sprintf("kc%d", i))
			must(err)
			ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
			if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
				log.Printf("TUNSETIFF: %v", err)
				return
			}
			b := make([]byte, 2048)
			unix.Read(fd, b)
		}})
	}
	var wg sync.WaitGroup
	n := 0
	for _, c := range chains {
		for i := range per {
			wg.Add(1)
			n++
			go func() {
				runtime.LockOSThread()
				wg.Done()
				c.run(i)
				select {} // returned (an error): stay locked, never reused
			}()
		}
	}
	wg.Wait()
	// Child processes: sleeping, and reading a pipe.
	for range per {
		exec.Command("/bin/sleep", "100000").Start()
		c := exec.Command("/bin/cat")
		c.Stdin, _ = pipeReader()
		c.Start()
	}
	// I/O: a writer and reader of a file in tmpfs, and sync, in a loop.
	go func() {
		b := make([]byte, 1<<16)
		for {
			f, err := os.Create("/tmp/w/io")
			if err != nil {
				return
			}
			for range 16 {
				f.Write(b)
			}
			f.Sync()
			f.Close()
			unix.Sync()
		}
	}()
	return n
}

// keep holds the files whose descriptors must stay open (an unreachable
// os.File is closed by its finalizer).
var keep []*os.File

func pipeReader() (io.Reader, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	keep = append(keep, r, w)
	return r, nil
}
