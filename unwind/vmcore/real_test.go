package vmcore

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// TestRealVmcores reads the vmcores of real Debian arm64 kernels
// (testdata/vmcores, made by capture.sh: 6.12 booted with 52-bit VAs and
// LPA2 and with arm64.nolva, 6.1 with 48-bit VAs) and checks them against what the guest
// printed: a sample of its /proc/kallsyms must equal the symbols decoded
// from the kallsyms tables in the dump, and every CPU's frame record must
// be readable through the page tables, its return address a kernel
// function once the PAC is stripped.
func TestRealVmcores(t *testing.T) {
	paths, _ := filepath.Glob("../../testdata/vmcores/*.vmcore.gz")
	if len(paths) < 3 {
		t.Fatalf("want 3 committed vmcores, found %d", len(paths))
	}
	for _, p := range paths {
		t.Run(filepath.Base(p), func(t *testing.T) {
			f, err := os.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			zr, err := gzip.NewReader(f)
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(zr)
			if err != nil {
				t.Fatal(err)
			}
			v, err := Load(p, bytes.NewReader(b), int64(len(b)))
			if err != nil {
				t.Fatal(err)
			}
			// debian-6.12...: built for 52-bit VAs (PAGE_OFFSET from
			// VA_BITS 52), booted with 52 or 48; debian-6.1...: 48.
			va52 := strings.Contains(p, "va52")
			release, vaBits, pageOff := "6.12.", 52, uint64(0xfff0_0000_0000_0000)
			if strings.Contains(p, "debian-6.1.") {
				release, vaBits, pageOff = "6.1.", 48, 0xffff_0000_0000_0000
			}
			if !strings.HasPrefix(v.Info.OSRelease, release) || v.Info.VABits != vaBits || (v.Info.VABitsActual == 52) != va52 {
				t.Errorf("info: release %q, VA %d/%d", v.Info.OSRelease, v.Info.VABits, v.Info.VABitsActual)
			}
			if v.PageOffset != pageOff {
				t.Errorf("PAGE_OFFSET %#x, want %#x", v.PageOffset, pageOff)
			}
			if !strings.Contains(v.Translation(), "checked by") {
				t.Errorf("translation: %s", v.Translation())
			}
			t.Logf("%s: %s", filepath.Base(p), v.Translation())
			syms, err := v.Kallsyms()
			// The names expand to a few times the bytes of
			// kallsyms_names: far below the bound on hostile tables.
			if _, st, err := v.kallsyms(); err != nil || st.expanded > st.read*kallsymsRatio/4 {
				t.Errorf("kallsyms_names: %d bytes expand to %d (%v), more than a quarter of the bound", st.read, st.expanded, err)
			} else {
				t.Logf("kallsyms_names: %d bytes expand to %d (%.2f times)", st.read, st.expanded, float64(st.expanded)/float64(st.read))
			}
			if err != nil {
				t.Fatal(err)
			}
			printed, total := readSample(t, strings.TrimSuffix(p, ".vmcore.gz")+".kallsyms.txt")
			// /proc/kallsyms also lists the fw_cfg module's symbols.
			if len(syms) > total || len(syms) < total-200 {
				t.Errorf("decoded %d symbols, /proc/kallsyms had %d lines", len(syms), total)
			}
			byAddr := map[uint64][]KSym{}
			for _, s := range syms {
				byAddr[s.Addr] = append(byAddr[s.Addr], s)
			}
			matched := 0
			for _, want := range printed {
				found := false
				for _, s := range byAddr[want.Addr] {
					if s.Name == want.Name && s.Type == want.Type {
						found = true
					}
				}
				if !found {
					t.Errorf("printed %c %s at %#x: not decoded that way (%+v)", want.Type, want.Name, want.Addr, byAddr[want.Addr])
				}
				matched++
			}
			if matched < 100 {
				t.Errorf("only %d printed symbols compared", matched)
			}
			text := func(pc uint64) (string, bool) {
				i := sort.Search(len(syms), func(i int) bool { return syms[i].Addr > pc }) - 1
				if i < 0 || syms[i].Type != 'T' && syms[i].Type != 't' || pc-syms[i].Addr >= syms[i].Size {
					return "", false
				}
				return syms[i].Name, true
			}
			for i, c := range v.CPUs {
				lr, err := v.ReadVirt64(c.Regs.X[29] + 8)
				if err != nil {
					t.Errorf("cpu%d: frame record at x29 %#x: %v", i, c.Regs.X[29], err)
					continue
				}
				fn, ok := text(v.Layout.Strip(lr))
				if !ok || lr == v.Layout.Strip(lr) {
					t.Errorf("cpu%d: lr %#x (stripped %#x) is not a PAC-signed kernel text address", i, lr, v.Layout.Strip(lr))
				}
				pcFn, _ := text(c.Regs.PC)
				t.Logf("cpu%d: pc in %s, caller %s", i, pcFn, fn)
			}
		})
	}
}

// readSample reads capture.sh's kallsyms sample: "KS ADDR TYPE NAME"
// lines and "KEND COUNT".
func readSample(t *testing.T, path string) ([]KSym, int) {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []KSym
	total := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		switch {
		case len(fs) == 2 && fs[0] == "KEND":
			total, _ = strconv.Atoi(fs[1])
		case len(fs) == 4 && fs[0] == "KS":
			a, err := strconv.ParseUint(fs[1], 16, 64)
			if err != nil {
				t.Fatalf("%s: %q", path, sc.Text())
			}
			out = append(out, KSym{Addr: a, Type: fs[2][0], Name: fs[3]})
		}
	}
	if total == 0 || len(out) == 0 {
		t.Fatalf("%s: no sample", path)
	}
	return out, total
}
