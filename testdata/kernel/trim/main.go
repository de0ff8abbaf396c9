// Command trim turns the raw vmcores of one kernel capture into the small
// files shipped beside it: for each stop it opens the full dump, runs every
// unwind the checks run (each CPU from its registers; at the sysrq-t stop
// every task from its cpu_context) with the reader recording the physical
// pages read (page tables, BTF, per-CPU data, task structs, stacks), and
// writes STOP.vmcore.gz, a valid ELF vmcore holding only those pages
// (gzip). It writes syms.txt.gz, the /proc/kallsyms lines of every function
// a walk or a printed trace names, the symbol after each (its size), and
// the data symbols the unwinder reads. Then it reopens the trimmed files
// and checks that every walk gives the same frames.
//
//	go run ./testdata/kernel/trim -raw /work/kcap/captures/deb-6.1 -out testdata/kernel/deb-6.1
//
// Raw vmcores may be STOP.vmcore or STOP.vmcore.zst (decompressed with the
// zstd command). It lives under testdata so the module never links it.
package main

import (
	"bytes"
	"compress/gzip"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/unwindkit/unwindkit/fp"
	"github.com/unwindkit/unwindkit/internal/kcapture"
	"github.com/unwindkit/unwindkit/unwind/kernel"
	"github.com/unwindkit/unwindkit/unwind/vmcore"
)

// dataSyms are the data symbols the unwinder may read.
var dataSyms = []string{"_stext", "_etext", "__start_BTF", "__stop_BTF", "__per_cpu_offset", "__entry_task",
	"irq_stack_ptr", "overflow_stack", "sdei_stack_normal_ptr", "sdei_stack_critical_ptr", "init_task",
	"irq_shadow_call_stack_ptr", "sdei_shadow_call_stack_normal_ptr", "sdei_shadow_call_stack_critical_ptr",
	"modules",
	"irq_shadow_call_stack_saved_ptr", "sdei_shadow_call_stack_normal_saved_ptr", "sdei_shadow_call_stack_critical_saved_ptr",
	"dynamic_scs_enabled"}

func main() {
	raw := flag.String("raw", "", "raw capture directory (expected.json is read from -out)")
	out := flag.String("out", "", "shipped capture directory (testdata/kernel/NAME)")
	flag.Parse()
	if *raw == "" || *out == "" {
		log.Fatal("usage: trim -raw KCAP/captures/NAME -out testdata/kernel/NAME")
	}
	cp, err := kcapture.OpenCapture(*out)
	if err != nil {
		log.Fatal(err)
	}
	full, err := readKallsyms(filepath.Join(*raw, "kallsyms.gz"))
	if err != nil {
		log.Fatal(err)
	}
	// Data symbols from vmlinux (layout.sh) for kernels whose kallsyms
	// has none (no CONFIG_KALLSYMS_ALL).
	if ds, err := readKallsyms(filepath.Join(*out, "datasyms.txt.gz")); err == nil {
		full = kernel.MergeDataSyms(full, ds)
	}
	// Module symbols are read from the dump (kernel.Modules), never
	// shipped from /proc/kallsyms: the tests check that reading.
	full = slices.DeleteFunc(full, func(s vmcore.KSym) bool { return s.Module != "" })
	keep := map[string]bool{}
	for _, n := range dataSyms {
		keep[n] = true
	}
	for _, t := range cp.Expected.Traces {
		for _, f := range t.Frames {
			keep[kcapture.FuncOf(f)] = true
		}
		for _, f := range t.SCS {
			keep[kcapture.FuncOf(f)] = true
		}
	}
	var pcs []uint64
	reports := map[string]*kernel.Report{}
	// The BTF is kept once, in the first stop's vmcore; the other stops
	// of the same boot use it (kcapture.Capture.Kernel does the same).
	var btf *vmcore.BTF
	var btfBuild string
	for i := range cp.Expected.Stops {
		s := &cp.Expected.Stops[i]
		path, cleanup, err := rawVmcore(*raw, s.Name)
		if err != nil {
			log.Fatal(err)
		}
		v, err := vmcore.Open(path)
		if err != nil {
			log.Fatal(err)
		}
		k0, err := kernel.New(v, full, kernel.Options{Current: s.SPEL0()})
		if err != nil {
			log.Fatal(err)
		}
		v.RecordReads(true)
		opts := kernel.Options{Current: s.SPEL0(), BTFAt: k0.BTFAt, BTFSize: k0.BTFSize}
		if i == 0 {
			btf, btfBuild = k0.BTF, k0.Build()
		} else {
			opts.BTF, opts.BTFFrom, opts.BTFBuild = btf, cp.Expected.Stops[0].Name, btfBuild
		}
		k, err := kernel.New(v, full, opts)
		if err != nil {
			log.Fatal(err)
		}
		rep := k.Unwind(s.Name == "t")
		if _, err := k.Modules(); err != nil {
			fmt.Printf("%s: modules: %v\n", s.Name, err)
		}
		// The code before each pc interrupted at an exception boundary
		// (where the prologue analysis says whether x30 was still the
		// caller's: the checks against drgn, which has that caller).
		for _, r := range allResults(rep) {
			for _, f := range r.Frames {
				k.Format(f.PC) // names module frames from the dump's module symbols
				if f.Origin == fp.OriginRegsPC {
					k.PrologueAt(f.PC)
				}
			}
		}
		pages := v.PagesRead()
		v.RecordReads(false)
		reports[s.Name] = rep
		for _, r := range allResults(rep) {
			for _, f := range r.Frames {
				pcs = append(pcs, f.PC)
			}
		}
		dst := filepath.Join(*out, s.Name+".vmcore.gz")
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		if err := v.WriteTrimmed(zw, v.PagesToRanges(pages)); err != nil {
			log.Fatal(err)
		}
		if err := zw.Close(); err != nil {
			log.Fatal(err)
		}
		if err := os.WriteFile(dst, buf.Bytes(), 0o644); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s: %d pages read, %s %d bytes\n", s.Name, len(pages), dst, buf.Len())
		v.Close()
		cleanup()
	}
	// The symbols: each frame's function and the next symbol.
	for _, pc := range pcs {
		// every symbol at the address of the one holding pc: the kernel
		// prints the first of them
		i := sort.Search(len(full), func(i int) bool { return full[i].Addr > pc }) - 1
		for j := i; j >= 0 && full[j].Addr == full[i].Addr; j-- {
			keep[full[j].Name] = true
		}
	}
	// Kept in /proc/kallsyms order: among symbols at one address the
	// kernel prints the first (kallsyms' get_symbol_pos), so aliases must
	// keep their order.
	idx := map[int]bool{}
	for i, s := range full {
		if !keep[s.Name] {
			continue
		}
		idx[i] = true
		// the next symbol at a higher address gives the size
		for j := i + 1; j < len(full); j++ {
			if full[j].Addr > s.Addr {
				idx[j] = true
				break
			}
		}
	}
	var lines []string
	for i, s := range full {
		if idx[i] {
			lines = append(lines, fmt.Sprintf("%016x %c %s", s.Addr, s.Type, s.Name))
		}
	}
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	zw.Write([]byte(strings.Join(lines, "\n") + "\n"))
	zw.Close()
	if err := os.WriteFile(filepath.Join(*out, "syms.txt.gz"), buf.Bytes(), 0o644); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("syms.txt.gz: %d symbols, %d bytes\n", len(lines), buf.Len())
	// Check: the shipped files give the same walks.
	cp, err = kcapture.OpenCapture(*out)
	if err != nil {
		log.Fatal(err)
	}
	for i := range cp.Expected.Stops {
		s := &cp.Expected.Stops[i]
		k, err := cp.Kernel(s)
		if err != nil {
			log.Fatal(err)
		}
		rep := k.Unwind(s.Name == "t")
		a, b := allResults(reports[s.Name]), allResults(rep)
		if len(a) != len(b) {
			log.Fatalf("%s: %d walks on the full dump, %d on the trimmed one", s.Name, len(a), len(b))
		}
		for j := range a {
			if !reflect.DeepEqual(a[j].Frames, b[j].Frames) || a[j].End != b[j].End {
				log.Fatalf("%s: walk %d differs on the trimmed dump: %v vs %v", s.Name, j, a[j].Err, b[j].Err)
			}
		}
		fa, fb := reports[s.Name], rep
		for j := range fa.CPUs {
			if !reflect.DeepEqual(fa.CPUs[j].SCS, fb.CPUs[j].SCS) || (fa.CPUs[j].SCSErr == nil) != (fb.CPUs[j].SCSErr == nil) {
				log.Fatalf("%s: cpu %d SCS copy differs on the trimmed dump: %v vs %v", s.Name, j, fa.CPUs[j].SCSErr, fb.CPUs[j].SCSErr)
			}
		}
		for j := range fa.Tasks {
			if !reflect.DeepEqual(fa.Tasks[j].SCS, fb.Tasks[j].SCS) {
				log.Fatalf("%s: task %d SCS copy differs on the trimmed dump", s.Name, fa.Tasks[j].Task.PID)
			}
		}
		fmt.Printf("%s: %d walks and SCS copies identical on the trimmed dump\n", s.Name, len(a))
	}
}

func allResults(r *kernel.Report) []*kernel.Result {
	var out []*kernel.Result
	for i := range r.CPUs {
		out = append(out, &r.CPUs[i].Result)
	}
	for i := range r.Tasks {
		out = append(out, &r.Tasks[i].Result)
	}
	return out
}

func readKallsyms(path string) ([]vmcore.KSym, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, err
	}
	return vmcore.ParseKallsyms(zr)
}

// rawVmcore returns the path of stop's full vmcore, decompressing
// STOP.vmcore.zst into a temporary file when needed.
func rawVmcore(dir, stop string) (string, func(), error) {
	p := filepath.Join(dir, stop+".vmcore")
	if _, err := os.Stat(p); err == nil {
		return p, func() {}, nil
	}
	tmp, err := os.CreateTemp("", "trim-*.vmcore")
	if err != nil {
		return "", nil, err
	}
	tmp.Close()
	cmd := exec.Command("zstd", "-dqf", p+".zst", "-o", tmp.Name())
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		os.Remove(tmp.Name())
		return "", nil, fmt.Errorf("zstd -d %s.zst: %w", p, err)
	}
	return tmp.Name(), func() { os.Remove(tmp.Name()) }, nil
}
