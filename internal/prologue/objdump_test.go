package prologue

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/unwindkit/unwindkit/internal/needs"
)

// The system libraries of Debian's arm64 cross packages: libc6-arm64-cross,
// libstdc++6-arm64-cross and libgcc-s1-arm64-cross. All have .dynsym only.
const crossLib = "/usr/aarch64-linux-gnu/lib"

var objdumpLibs = []struct{ name, pkg string }{
	{"libc.so.6", "libc6-arm64-cross"},
	{"ld-linux-aarch64.so.1", "libc6-arm64-cross"},
	{"libm.so.6", "libc6-arm64-cross"},
	{"libstdc++.so.6", "libstdc++6-arm64-cross"},
	{"libgcc_s.so.1", "libgcc-s1-arm64-cross"},
}

// objdumpLine is one disassembled instruction: "  addr:\tword \tmnemonic\toperands".
var objdumpLine = regexp.MustCompile(`^ *([0-9a-f]+):\t([0-9a-f]{8}) \t([^\t]+)\t?([^<\n]*)`)

// objdumpInsn is one instruction as objdump prints it.
type objdumpInsn struct {
	mnem string // "stp"
	ops  string // "x29, x30, [sp, #-16]!" (comments and <sym> dropped)
}

// disassemble runs objdump -d once on the whole file (-z: zero words too,
// not "...") and indexes its instructions by address.
func disassemble(t *testing.T, objdump, path string) map[uint64]objdumpInsn {
	t.Helper()
	out, err := exec.Command(objdump, "-d", "-z", path).Output()
	if err != nil {
		t.Fatalf("%s -d %s: %v", objdump, path, err)
	}
	insns := make(map[uint64]objdumpInsn, len(out)/40)
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		m := objdumpLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		addr, _ := strconv.ParseUint(m[1], 16, 64)
		ops := strings.TrimSpace(m[4])
		if i := strings.Index(ops, "//"); i >= 0 {
			ops = strings.TrimSpace(ops[:i])
		}
		insns[addr] = objdumpInsn{strings.TrimSpace(m[3]), ops}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return insns
}

// fromObjdump classifies one function from objdump's text, independently
// of the scanner's decoder, by the same rules the scanner documents.
func fromObjdump(insns map[uint64]objdumpInsn, addr, size uint64) (Func, error) {
	f := Func{Addr: addr, Size: size}
	entry, pair := true, false
	pushAt, signAt := -1, -1
	sign := func(k Key, i int) {
		if f.Sign == KeyNone {
			f.Sign, signAt = k, i
		}
	}
	auth := func(k Key) {
		if f.Auth == KeyNone {
			f.Auth = k
		}
	}
	for i := 0; uint64(4*i) < size; i++ {
		in, ok := insns[addr+uint64(4*i)]
		if !ok {
			return f, fmt.Errorf("objdump has no instruction at %#x", addr+uint64(4*i))
		}
		x30 := strings.HasPrefix(in.ops, "x30")
		isEntry := false
		switch m := in.mnem; {
		case m == "str" && in.ops == "x30, [x18], #8":
			f.SCSPush = true
			if pushAt < 0 {
				pushAt = i
			}
		case m == "ldr" && in.ops == "x30, [x18, #-8]!":
			f.SCSPop = true
		case m == "paciasp" || m == "paciaz" || (m == "pacia" || m == "paciza") && x30:
			sign(KeyA, i)
		case m == "pacibsp" || m == "pacibz" || (m == "pacib" || m == "pacizb") && x30:
			sign(KeyB, i)
		case m == "autiasp" || m == "autiaz" || (m == "autia" || m == "autiza") && x30 || m == "retaa":
			auth(KeyA)
		case m == "autibsp" || m == "autibz" || (m == "autib" || m == "autizb") && x30 || m == "retab":
			auth(KeyB)
		case m == "bti":
			if entry {
				f.BTI = true
			}
			isEntry = true
		case m == "nop":
			if entry {
				f.EntryNOPs++
			}
			isEntry = true
		case m == "bl" || m == "blr" || m == "blraa" || m == "blrab" || m == "blraaz" || m == "blrabz":
			f.Calls++
		case m == "stp" && (strings.HasPrefix(in.ops, "x29, x30, [sp]") ||
			strings.HasPrefix(in.ops, "x29, x30, [sp, #")):
			pair = true
		case (m == "mov" && in.ops == "x29, sp") || (m == "add" && strings.HasPrefix(in.ops, "x29, sp, #")):
			if pair {
				f.FrameRecord = true
			}
		case m == "mov" && in.ops == "x9, x30" && i < 4:
			f.FtraceMovX9 = true
		}
		if !isEntry {
			entry = false
		}
	}
	f.SignBeforePush = signAt >= 0 && pushAt >= 0 && signAt < pushAt
	return f, nil
}

// comparable keeps the fields objdump's text determines.
func comparable(f Func) Func {
	return Func{Addr: f.Addr, Size: f.Size, SCSPush: f.SCSPush, SCSPop: f.SCSPop, Sign: f.Sign, Auth: f.Auth,
		SignBeforePush: f.SignBeforePush, FrameRecord: f.FrameRecord, BTI: f.BTI, EntryNOPs: f.EntryNOPs,
		FtraceMovX9: f.FtraceMovX9, Calls: f.Calls}
}

// objdumpCounts is one library's line of the README table.
type objdumpCounts struct {
	funcs, push, pop, sign, auth, frame, bti, nops, calls, mismatch int
}

// TestObjdump compares the scanner with aarch64-linux-gnu-objdump -d on
// Debian's arm64 system libraries, and on the committed test binaries
// (which have what Debian's libraries lack: SCS, PAC, BTI, patchable NOPs):
// for every function symbol with a size (STT_FUNC and STT_GNU_IFUNC;
// aliases and versioned duplicates once per address), SCS push and pop,
// PAC sign and auth keys (and which came first), frame record, BTI, entry
// NOPs, the ftrace mov and the calls over [st_value, st_value+st_size) must
// be equal. The symbols are read here with debug/elf, not through the
// scanner, and each file is disassembled once and sliced by address.
func TestObjdump(t *testing.T) {
	objdump := needs.Tool(t, "aarch64-linux-gnu-objdump", "binutils-aarch64-linux-gnu")
	committed, err := filepath.Glob(binDir + "/*.[es][lo]*")
	if err != nil || len(committed) < 10 {
		t.Fatalf("committed binaries: %v, %v", committed, err)
	}
	var table strings.Builder
	for _, lib := range objdumpLibs {
		path := filepath.Join(crossLib, lib.name)
		t.Run(lib.name, func(t *testing.T) {
			needs.File(t, path, lib.pkg)
			c := compareObjdump(t, objdump, path)
			fmt.Fprintf(&table, "| `%s` | %s |\n", lib.name, c)
		})
	}
	var all objdumpCounts
	for _, path := range committed {
		if strings.Contains(path, "nosyms") {
			continue
		}
		t.Run(filepath.Base(path), func(t *testing.T) {
			c := compareObjdump(t, objdump, path)
			all.add(c)
		})
	}
	fmt.Fprintf(&table, "| testdata/arm64/bin (%d files) | %s |\n", len(committed)-1, all)
	t.Logf("\n| file | functions | SCS push | SCS pop | sign | auth | frame record | BTI | entry NOPs | non-leaf | differ |\n"+
		"|---|---|---|---|---|---|---|---|---|---|---|\n%s", table.String())
}

func (c objdumpCounts) String() string {
	return fmt.Sprintf("%d | %d | %d | %d | %d | %d | %d | %d | %d | %d", c.funcs, c.push, c.pop,
		c.sign, c.auth, c.frame, c.bti, c.nops, c.calls, c.mismatch)
}

func (c *objdumpCounts) add(d objdumpCounts) {
	c.funcs += d.funcs
	c.push += d.push
	c.pop += d.pop
	c.sign += d.sign
	c.auth += d.auth
	c.frame += d.frame
	c.bti += d.bti
	c.nops += d.nops
	c.calls += d.calls
	c.mismatch += d.mismatch
}

// compareObjdump compares the scanner with objdump on one file.
func compareObjdump(t *testing.T, objdump, path string) objdumpCounts {
	var c objdumpCounts
	b, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	scanned := map[uint64]Func{}
	for _, f := range b.Funcs() {
		scanned[f.Addr] = f
	}
	ef, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	var syms []elf.Symbol
	for _, read := range []func() ([]elf.Symbol, error){ef.Symbols, ef.DynamicSymbols} {
		s, err := read()
		if err != nil && err != elf.ErrNoSymbols {
			t.Fatal(err)
		}
		syms = append(syms, s...)
	}
	insns := disassemble(t, objdump, path)
	done := map[uint64]bool{}
	for _, s := range syms {
		typ := elf.ST_TYPE(s.Info)
		if typ != elf.STT_FUNC && typ != elf.STT_LOOS || s.Size == 0 || s.Section == elf.SHN_UNDEF || done[s.Value] {
			continue
		}
		done[s.Value] = true
		c.funcs++
		want, err := fromObjdump(insns, s.Value, s.Size)
		if err != nil {
			t.Errorf("%s: %v", s.Name, err)
			c.mismatch++
			continue
		}
		got, ok := scanned[s.Value]
		if !ok || comparable(got) != want {
			c.mismatch++
			if c.mismatch <= 10 {
				t.Errorf("%s at %#x:\nscanner %+v\nobjdump %+v", s.Name, s.Value, comparable(got), want)
			}
		}
		c.push += b2i(want.SCSPush)
		c.pop += b2i(want.SCSPop)
		c.sign += b2i(want.Sign != KeyNone)
		c.auth += b2i(want.Auth != KeyNone)
		c.frame += b2i(want.FrameRecord)
		c.bti += b2i(want.BTI)
		c.nops += b2i(want.EntryNOPs > 0)
		c.calls += b2i(want.Calls > 0)
	}
	if c.funcs < 8 {
		t.Errorf("only %d functions compared", c.funcs)
	}
	if c.mismatch > 0 {
		t.Errorf("%d of %d functions differ from objdump", c.mismatch, c.funcs)
	}
	return c
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
