// Package outside holds the test that uses unwindkit the way another
// module does: a program in a module of its own, in a temporary directory,
// with a replace pointing at this checkout. It compiles only if every
// public package can be imported and used from outside, with no internal
// type in the API the program needs.
package outside

import (
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/unwindkit/unwindkit/internal/needs"
)

// program is the outside module's main package. It imports every public
// package, builds an FP walk and an SCS copy over memory it made itself,
// stores the trace in a depot, and asks live.Callers for its own stack.
const program = `package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strings"

	"github.com/unwindkit/unwindkit/depot"
	"github.com/unwindkit/unwindkit/fault"
	"github.com/unwindkit/unwindkit/fp"
	"github.com/unwindkit/unwindkit/percpu"
	"github.com/unwindkit/unwindkit/ptrauth"
	"github.com/unwindkit/unwindkit/scs"
	"github.com/unwindkit/unwindkit/unwind"
	"github.com/unwindkit/unwindkit/unwind/core"
	"github.com/unwindkit/unwindkit/unwind/debuginfo"
	"github.com/unwindkit/unwindkit/unwind/gcs"
	"github.com/unwindkit/unwindkit/unwind/kernel"
	"github.com/unwindkit/unwindkit/unwind/live"
	"github.com/unwindkit/unwindkit/unwind/live/stackid"
	"github.com/unwindkit/unwindkit/unwind/machine"
	"github.com/unwindkit/unwindkit/unwind/prologue"
	"github.com/unwindkit/unwindkit/unwind/snapshot"
	"github.com/unwindkit/unwindkit/unwind/vmcore"
)

var (
	layout = ptrauth.NewLayout(48, false)
	key    = ptrauth.Key{Hi: 0x0123456789abcdef, Lo: 0xfedcba9876543210}
)

// fpWalk lays out a task stack as bytes (three frame records with signed
// return addresses, ending at the FINAL meta record in the task's pt_regs)
// and walks it.
func fpWalk() *fp.Config {
	const low = 0x7fff0000
	data := make([]byte, fp.TaskStackSize)
	put := func(addr, v uint64) { binary.LittleEndian.PutUint64(data[addr-low:], v) }
	high := uint64(low + fp.TaskStackSize)
	regs := fp.TaskPtRegsAddr(high, fp.PtRegsLayout{})
	put(regs+fp.PtRegsStackFrameOff+fp.MetaTypeOff, fp.MetaFinal)
	x29 := regs + fp.PtRegsStackFrameOff
	for i := uint64(1); i <= 3; i++ {
		sp := x29 - 64
		put(sp, x29)
		put(sp+8, layout.Sign(0x400000+i, sp, key, ptrauth.QARMA5))
		x29 = sp
	}
	cfg := &fp.Config{
		Stacks:     []fp.Stack{{Kind: fp.Task, Low: low, High: high, Data: data}},
		FP:         x29,
		PC:         0x400000,
		TaskPtRegs: regs,
		Layout:     layout,
		Reliable:   true,
	}
	store := make([]uint64, 8)
	n, end, err := fp.SaveEnd(cfg, store, 0)
	fmt.Printf("fp: %d frames, end %v, err %v, %#x\n", n, end, err, store[:n])
	return cfg
}

// scsCopy copies a shadow call stack the program wrote itself: a kernel
// shadow stack of 1 KiB as bytes, with SCS_END_MAGIC in its last word and
// three signed return addresses pushed.
func scsCopy() {
	const base, size = 0xffff000012340000, 1024
	data := make([]byte, size)
	binary.LittleEndian.PutUint64(data[size-8:], scs.EndMagic)
	x18 := uint64(base)
	for i := uint64(1); i <= 3; i++ { // str x30, [x18], #8
		binary.LittleEndian.PutUint64(data[x18-base:], layout.Sign(0xffff800080000000+4*i, x18, key, ptrauth.QARMA5))
		x18 += 8
	}
	v := scs.NewSnapshotView(data, base, x18, layout)
	v.Segs[0].Size, v.Segs[0].Magic = size, true
	store := make([]uint64, 8)
	n, err := scs.Save(&v, store, 0)
	fmt.Printf("scs: %d entries, err %v, %#x\n", n, err, store[:n])
	// Overwriting the end magic is corruption, found by the same copy.
	binary.LittleEndian.PutUint64(data[size-8:], 0)
	_, err = scs.Save(&v, store, 0)
	var ce *scs.CorruptError
	fmt.Println("scs: magic overwritten:", errors.As(err, &ce) && ce.Rule == scs.RuleSCSEndMagicOverwritten)
	// Every package's CorruptError is package fault's: one type.
	var uce *unwind.CorruptError = ce
	fmt.Println("scs: fault rule:", uce.Rule == fault.RuleSCSEndMagicOverwritten && errors.Is(err, fault.ErrCorrupt))

	// The model's machine pushes real return addresses onto its shadow
	// stack; the SCS copy and the FP walk of the same CPU agree.
	cfg := machine.DefaultConfig()
	cfg.PAC = true
	cfg.Funcs = []machine.Func{{Name: "outer", Calls: []string{"inner"}}, {Name: "inner"}}
	m, err := machine.New(cfg)
	check(err)
	t, err := m.NewTask("outside", "outer")
	check(err)
	c := m.CPU(0)
	check(c.Switch(t))
	check(c.Call("inner"))
	var got [2][]uint64
	for i, method := range []unwind.Method{unwind.MethodSCS, unwind.MethodFP} {
		store := make([]uint64, 16)
		n, err := c.Unwind(method, machine.Inline, store, machine.SaveOptions{})
		check(err)
		got[i] = store[:n]
	}
	fmt.Printf("machine: SCS %d frames, FP %d frames, equal %v\n", len(got[0]), len(got[1]), fmt.Sprint(got[0]) == fmt.Sprint(got[1]))
}

func main() {
	cfg := fpWalk()
	scsCopy()

	// The front door over the same bytes, into a depot.
	d, err := depot.New(depot.Config{})
	check(err)
	src := unwind.NewFPSource(cfg, unwind.SourceOptions{})
	buf := make([]uint64, 8)
	h, err := unwind.SaveToDepot(d, src, buf, 1)
	check(err)
	h2, err := unwind.SaveToDepot(d, src, buf, 1)
	check(err)
	trace, err := d.Fetch(h, nil)
	check(err)
	fmt.Printf("depot: same handle %v, %#x\n", h == h2, trace)

	v, err := percpu.NewUint64(2)
	check(err)
	v.Store(1, 7)
	fmt.Println("percpu:", v.Load(0), v.Load(1))

	pcs := make([]uintptr, 64)
	n := live.Callers(1, pcs)
	var names []string
	for fr := range frames(pcs[:n]) {
		names = append(names, fr)
	}
	fmt.Println("live:", names[0], n == runtime.Callers(1, pcs))

	ids, err := stackid.New(depot.Config{})
	check(err)
	var hs [2]depot.Handle
	for i := range hs {
		hs[i], err = ids.Save(1)
		check(err)
	}
	n, err = ids.Fetch(hs[0], pcs)
	check(err)
	names = names[:0]
	for fr := range frames(pcs[:n]) {
		names = append(names, fr)
	}
	fmt.Println("stackid: same handle", hs[0] == hs[1], names[0])

	// Captures: each loader rejects an empty file with an error, not a panic.
	_, err = snapshot.Load(strings.NewReader(""))
	fmt.Println("snapshot: error", err != nil)
	_, err = core.Load("empty", bytes.NewReader(nil), 0)
	fmt.Println("core: error", err != nil)
	_, err = vmcore.Load("empty", bytes.NewReader(nil), 0)
	fmt.Println("vmcore: error", err != nil)
	_, err = debuginfo.NewFile("empty", bytes.NewReader(nil), 0)
	fmt.Println("debuginfo: error", errors.Is(err, debuginfo.ErrCorrupt))
	fmt.Println("prologue: leaf", prologue.ScanCode("ret", 0x1000, []byte{0xc0, 0x03, 0x5f, 0xd6}).Leaf())
	k := &kernel.Kernel{Syms: []vmcore.KSym{{Name: "el1h_64_irq_handler", Addr: 0x1000, Size: 0x28, Type: 't'}}}
	fmt.Println("kernel:", k.Format(0x1018))

	// A user thread's Guarded Control Stack: two calls, a signal, one
	// more call; the copy passes over the signal cap token.
	th, err := gcs.NewThread(0x7fff00000000, 4096)
	check(err)
	check(th.Call(0x400100))
	check(th.Call(0x400200))
	_, err = th.Signal(0x7ffff7f754ec)
	check(err)
	check(th.Call(0x400300))
	gv := th.View()
	n, err = gcs.Save(&gv, buf, 0)
	fmt.Printf("gcs: %d entries, err %v, %#x\n", n, err, buf[:n])
}

func frames(pcs []uintptr) func(func(string) bool) {
	return func(yield func(string) bool) {
		fs := runtime.CallersFrames(pcs)
		for {
			f, more := fs.Next()
			if !yield(f.Function) || !more {
				return
			}
		}
	}
}

func check(err error) {
	if err != nil {
		panic(err)
	}
}
`

// want is program's output: the FP walk strips the PACs it signed, the
// depot deduplicates, live.Callers agrees with runtime.Callers.
const want = `fp: 4 frames, end final, err <nil>, [0x400000 0x400003 0x400002 0x400001]
scs: 3 entries, err <nil>, [0xffff80008000000c 0xffff800080000008 0xffff800080000004]
scs: magic overwritten: true
scs: fault rule: true
machine: SCS 2 frames, FP 2 frames, equal true
depot: same handle true, [0x400003 0x400002 0x400001]
percpu: 0 7
live: main.main true
stackid: same handle true main.main
snapshot: error true
core: error true
vmcore: error true
debuginfo: error true
prologue: leaf true
kernel: el1h_64_irq_handler+0x18/0x28
gcs: 4 entries, err <nil>, [0x400304 0x7ffff7f754ec 0x400204 0x400104]`

// TestOutsideModule builds and runs program in a module of its own. It
// uses the checkout's go.sum and the requirements of its go.mod, so it
// needs no network with a filled module cache; CI's -mod=mod is honoured.
func TestOutsideModule(t *testing.T) {
	goTool := needs.Go(t) // the toolchain running this test
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	// The outside module requires this one and everything this one
	// requires, at the same versions.
	gomod := strings.Replace(string(mod), "module github.com/unwindkit/unwindkit", "module example.com/outside", 1) +
		"\nrequire github.com/unwindkit/unwindkit v0.0.0\n\nreplace github.com/unwindkit/unwindkit => " + root + "\n"
	dir := t.TempDir()
	for name, body := range map[string]string{"go.mod": gomod, "go.sum": string(sum), "main.go": program} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(goTool, "run", ".")
	cmd.Dir = dir
	// The program is built for and run on the host: a test binary run
	// under qemu-aarch64 (GOARCH=arm64 go test -exec) passes GOARCH on.
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "GOARCH=", "GOOS=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("outside module: %v\n%s\ngo.mod:\n%s", err, out, gomod)
	}
	// The program imports every public package there is.
	f, err := parser.ParseFile(token.NewFileSet(), "main.go", program, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	imported := map[string]bool{}
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		imported[p] = true
	}
	for p := range publicPackages(t) {
		if !imported[p] {
			t.Errorf("the outside program does not import %s", p)
		}
	}
	if got := strings.TrimSpace(string(out)); got != want {
		t.Fatalf("outside module printed\n%s\nwant\n%s", got, want)
	}
}
