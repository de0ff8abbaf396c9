package debuginfo_test

import (
	"bytes"
	"compress/gzip"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/unwindkit/unwindkit/unwind/debuginfo"
)

const testdata = "../../testdata/debuginfo"

// needs skips the test when tool is missing, naming the Debian package
// that has it; under CI (CI=true) a missing tool fails the test instead.
func needs(t testing.TB, tool, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(tool)
	if err == nil {
		return p
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s not found (Debian package %s); CI must have it", tool, pkg)
	}
	t.Skipf("%s not found: apt-get install %s", tool, pkg)
	return ""
}

func gunzip(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// a2l is addr2line -a -f -i's answer at one address: each frame's two
// lines, name then file:line.
type a2l struct {
	addr  uint64
	lines []string
}

func parseA2L(t testing.TB, out string) []a2l {
	t.Helper()
	var r []a2l
	for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		if strings.HasPrefix(l, "0x") {
			a, err := strconv.ParseUint(l[2:], 16, 64)
			if err != nil {
				t.Fatalf("addr2line output: %q", l)
			}
			r = append(r, a2l{addr: a})
			continue
		}
		if len(r) == 0 {
			t.Fatalf("addr2line output starts with %q", l)
		}
		r[len(r)-1].lines = append(r[len(r)-1].lines, l)
	}
	return r
}

// asAddr2line prints frames as addr2line -f -i prints them. binutils 2.40
// prints the pc's discriminator (frames[0]'s) on every level's line, the
// call sites' too: so does this.
func asAddr2line(frames []debuginfo.Frame) []string {
	var out []string
	disc := 0
	if len(frames) > 0 {
		disc = frames[0].Discriminator
	}
	for _, fr := range frames {
		name := fr.LinkageName // addr2line prefers it
		if name == "" {
			name = fr.Func
		}
		if name == "" {
			name = "??"
		}
		file := fr.Path
		if file == "" {
			file = "??"
		}
		line := "?"
		if fr.Line != 0 {
			line = strconv.Itoa(fr.Line)
			if disc != 0 {
				line += fmt.Sprintf(" (discriminator %d)", disc)
			}
		}
		out = append(out, name, file+":"+line)
	}
	if len(out) == 0 {
		out = []string{"??", "??:0"}
	}
	return out
}

// normalize applies the named rules that make addr2line's text and ours
// comparable.
//
//   - clean: addr2line joins the directory and the file name without
//     cleaning the result ("dir/./x.h"); Path is cleaned.
func normalize(lines []string) []string {
	out := slices.Clone(lines)
	for i := 1; i < len(out); i += 2 {
		f, l, ok := strings.Cut(out[i], ":")
		if ok && f != "??" {
			out[i] = path.Clean(f) + ":" + l
		}
	}
	return out
}

// symbolizerLines normalizes llvm-symbolizer's GNU-style answer, which
// spells an unknown line 0 where addr2line prints "?".
func symbolizerLines(lines []string) []string {
	out := normalize(lines)
	for i := 1; i < len(out); i += 2 {
		if f, ok := strings.CutSuffix(out[i], ":0"); ok && f != "??" {
			out[i] = f + ":?"
		}
	}
	return out
}

// droppedLevels reports whether addr2line's lines are ours with whole
// inlined levels left out: a level's name, and the call site that follows
// it (binutils 2.40 does not read DW_FORM_rnglistx ranges of inlined
// subroutines, which clang's DWARF 5 uses, so it misses those levels and
// gives their line to the level outside).
func droppedLevels(ours, a2l []string) bool {
	if len(a2l) >= len(ours) || len(a2l) < 2 || ours[1] != a2l[1] {
		return false
	}
	// Names in ours: 0, 2, 4, ...; a level k dropped takes out ours[2k]
	// and ours[2k+3] (its call site, printed with the level outside).
	names := func(l []string) (n []string) {
		for i := 0; i < len(l); i += 2 {
			n = append(n, l[i])
		}
		return
	}
	sites := func(l []string) (s []string) {
		for i := 1; i < len(l); i += 2 {
			s = append(s, l[i])
		}
		return
	}
	on, os_, an, as := names(ours), sites(ours), names(a2l), sites(a2l)
	// Keep level i of ours when it matches the next of addr2line's.
	j := 0
	for i := range on {
		if j < len(an) && on[i] == an[j] && (j == 0 || os_[i] == as[j]) {
			j++
			continue
		}
		if i == len(on)-1 {
			return false // the concrete function is never dropped
		}
	}
	return j == len(an)
}

// rules counts the differences from addr2line that a named rule explains.
type rules struct {
	rnglistx int // binutils drops levels with rnglistx ranges; llvm-symbolizer agrees with us
	file1    int // binutils names another file for file 1; llvm-symbolizer agrees with us
}

// otherFile reports rule file1: binutils 2.40 prints the unit's primary
// file (file 0) for rows of file 1 of a DWARF 5 line table where the two
// differ (gcc's LTO units, whose file 0 is "<artificial>"; a kernel unit
// whose file 1 is a trace header). The names and line numbers are
// addr2line's, only paths differ, and llvm-symbolizer's file:line lines
// (its names come from .symtab) are ours.
func otherFile(ours, a2l, second []string) bool {
	if len(ours) != len(a2l) || len(ours) != len(second) {
		return false
	}
	differ := false
	for i := range ours {
		if i%2 == 0 {
			if ours[i] != a2l[i] {
				return false
			}
			continue
		}
		if ours[i] != second[i] {
			return false
		}
		_, lo, _ := strings.Cut(ours[i], ":")
		_, la, _ := strings.Cut(a2l[i], ":")
		if lo != la {
			return false
		}
		differ = differ || ours[i] != a2l[i]
	}
	return differ
}

// compare checks our frames against addr2line's at every address,
// returning the number of addresses and of inlined frames compared. Where
// addr2line differs, second (llvm-symbolizer's answers) must equal ours
// and the difference must be rule rnglistx (see droppedLevels).
func compare(t *testing.T, name string, f *debuginfo.File, want, second []a2l) (addrs, inlined int, r rules) {
	t.Helper()
	bad := 0
	other := map[uint64][]string{}
	for _, s := range second {
		other[s.addr] = s.lines
	}
	for _, w := range want {
		frames, err := f.Lookup(w.addr, debuginfo.PC)
		if err != nil && !errors.Is(err, debuginfo.ErrNotFound) {
			t.Errorf("%s: %#x: %v", name, w.addr, err)
			continue
		}
		got := normalize(asAddr2line(frames))
		exp := normalize(w.lines)
		if !slices.Equal(got, exp) {
			if s, ok := other[w.addr]; ok && slices.Equal(got, symbolizerLines(s)) && droppedLevels(got, exp) {
				r.rnglistx++
				addrs++
				inlined += max(0, len(frames)-1)
				continue
			}
			if s, ok := other[w.addr]; ok && otherFile(got, exp, symbolizerLines(s)) {
				r.file1++
				addrs++
				inlined += max(0, len(frames)-1)
				continue
			}
			if bad++; bad <= 10 {
				t.Errorf("%s: %#x:\n got %q\nwant %q (llvm-symbolizer %q)", name, w.addr, got, exp, other[w.addr])
			}
			continue
		}
		addrs++
		inlined += max(0, len(frames)-1)
	}
	if bad > 10 {
		t.Errorf("%s: %d addresses differ in all", name, bad)
	}
	return addrs, inlined, r
}

func binaries(t *testing.T) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(testdata, "bin", "*.elf.gz"))
	if err != nil || len(m) == 0 {
		t.Fatalf("no test binaries in %s/bin: %v", testdata, err)
	}
	return m
}

// TestAddr2lineGolden compares every instruction of every function of the
// committed binaries (gcc and clang, DWARF 4 and 5, an executable and a
// shared library) with addr2line's answers that build.sh recorded.
func TestAddr2lineGolden(t *testing.T) {
	for _, bin := range binaries(t) {
		name := strings.TrimSuffix(filepath.Base(bin), ".elf.gz")
		t.Run(name, func(t *testing.T) {
			b := gunzip(t, bin)
			stem := strings.TrimSuffix(bin, ".elf.gz")
			want := parseA2L(t, string(gunzip(t, stem+".addr2line.gz")))
			second := parseA2L(t, string(gunzip(t, stem+".llvm-symbolizer.gz")))
			f, err := debuginfo.NewFile(name, bytes.NewReader(b), int64(len(b)))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			n, inl, r := compare(t, name, f, want, second)
			if n != len(want) || inl < 100 {
				t.Errorf("%s: %d of %d addresses (%d inlined frames) equal addr2line's", name, n, len(want), inl)
			}
			if r.rnglistx > 0 && !strings.HasPrefix(name, "clang-dwarf5") {
				t.Errorf("%s: rule rnglistx on a binary without DW_FORM_rnglistx", name)
			}
			if r.file1 > 0 && name != "gcc-lto" {
				t.Errorf("%s: rule file1 outside the LTO build", name)
			}
			t.Logf("%s: %d addresses equal addr2line's (%d inlined frames), %d by rule rnglistx, %d by rule file1",
				name, n, inl, r.rnglistx, r.file1)
		})
	}
}

// funcAddrs lists every instruction address of every function symbol.
func funcAddrs(t *testing.T, file string) []uint64 {
	ef, err := elf.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	syms, err := ef.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	var out []uint64
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Section == elf.SHN_UNDEF {
			continue
		}
		for a := s.Value; a < s.Value+s.Size; a += 4 {
			out = append(out, a)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// callSites lists the addresses of the bl and blr instructions.
func callSites(t *testing.T, file string) []uint64 {
	ef, err := elf.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	var out []uint64
	for _, s := range ef.Sections {
		if s.Flags&elf.SHF_EXECINSTR == 0 || s.Type != elf.SHT_PROGBITS {
			continue
		}
		b, err := s.Data()
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+4 <= len(b); i += 4 {
			ins := binary.LittleEndian.Uint32(b[i:])
			if ins&0xfc000000 == 0x94000000 || ins&0xfffffc1f == 0xd63f0000 {
				out = append(out, s.Addr+uint64(i))
			}
		}
	}
	return out
}

func runAddr2line(t *testing.T, tool, file string, addrs []uint64, extra ...string) []a2l {
	args := append(extra, "-a", "-f", "-i", "-e", file)
	for _, a := range addrs {
		args = append(args, fmt.Sprintf("%#x", a))
	}
	out, err := exec.Command(tool, args...).Output()
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		if l != "" { // llvm-symbolizer ends each answer with a blank line
			lines = append(lines, l)
		}
	}
	return parseA2L(t, strings.Join(lines, "\n"))
}

// checkLive compares Open (the mapped file) with addr2line run now at
// every instruction, and checks that a return address after each call
// site is looked up at the call.
func checkLive(t *testing.T, tool, file string) {
	addrs := funcAddrs(t, file)
	want := runAddr2line(t, tool, file, addrs)
	sym := needs(t, "llvm-symbolizer", "llvm")
	second := runAddr2line(t, sym, file, addrs, "--output-style=GNU")
	if len(want) != len(addrs) {
		t.Fatalf("%s: addr2line answered %d of %d addresses", file, len(want), len(addrs))
	}
	f, err := debuginfo.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n, inl, r := compare(t, file, f, want, second)
	calls := callSites(t, file)
	for _, c := range calls {
		at, err1 := f.Lookup(c, debuginfo.PC)
		ra, err2 := f.Lookup(c+4, debuginfo.ReturnAddress)
		if fmt.Sprint(at, err1) != fmt.Sprint(ra, err2) {
			t.Errorf("%s: return address %#x: got %v %v, want the call's %v %v", file, c+4, ra, err2, at, err1)
		}
	}
	if n != len(addrs) || len(calls) < 20 {
		t.Errorf("%s: %d of %d addresses equal addr2line's; %d call sites", file, n, len(addrs), len(calls))
	}
	t.Logf("%s: %d addresses equal addr2line's (%d inlined frames; %d by rule rnglistx, %d by rule file1), %d call sites",
		filepath.Base(file), n, inl, r.rnglistx, r.file1, len(calls))
}

// TestAddr2lineLive runs addr2line on the committed binaries, through
// Open's mapped path.
func TestAddr2lineLive(t *testing.T) {
	tool := needs(t, "aarch64-linux-gnu-addr2line", "binutils-aarch64-linux-gnu")
	dir := t.TempDir()
	for _, bin := range binaries(t) {
		file := filepath.Join(dir, strings.TrimSuffix(filepath.Base(bin), ".gz"))
		if err := os.WriteFile(file, gunzip(t, bin), 0o644); err != nil {
			t.Fatal(err)
		}
		checkLive(t, tool, file)
	}
}

// TestAddr2lineFresh builds the program again with the compilers here and
// compares with addr2line.
func TestAddr2lineFresh(t *testing.T) {
	if testing.Short() {
		t.Skip("builds five binaries")
	}
	tool := needs(t, "aarch64-linux-gnu-addr2line", "binutils-aarch64-linux-gnu")
	needs(t, "aarch64-linux-gnu-gcc", "gcc-aarch64-linux-gnu")
	needs(t, "clang", "clang")
	needs(t, "ld.lld", "lld")
	dir := t.TempDir()
	cmd := exec.Command("sh", filepath.Join(testdata, "build.sh"), dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build.sh: %v\n%s", err, out)
	}
	m, _ := filepath.Glob(filepath.Join(dir, "*.elf"))
	if len(m) != len(binaries(t)) {
		t.Fatalf("build.sh built %d binaries, want %d", len(m), len(binaries(t)))
	}
	for _, file := range m {
		checkLive(t, tool, file)
	}
}
