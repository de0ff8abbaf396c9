package snapshot

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/unwindkit/unwindkit/internal/errs"
)

// words encodes little-endian 8-byte words as standard base64.
func words(ws ...uint64) string {
	b := make([]byte, 8*len(ws))
	for i, w := range ws {
		binary.LittleEndian.PutUint64(b[8*i:], w)
	}
	return base64.StdEncoding.EncodeToString(b)
}

// valid returns a small well-formed snapshot as a generic JSON tree, so
// tests can delete or replace one field at a time.
func valid() map[string]any {
	return map[string]any{
		"version": 1,
		"arch":    "arm64",
		"va_bits": 48,
		"tbi":     true,
		"regs": map[string]any{
			"pc": "0x1010", "sp": "0x8000", "x18": "0x20010",
			"x29": "0x8000", "x30": "0x1024",
		},
		"scs_base": "0x20000",
		"regions": []any{
			map[string]any{"name": "stack", "kind": "stack", "base": "0x8000",
				// two frame records: {0x8010, 0x1024} -> {0, 0x1044}
				"data": words(0x8010, 0x1024, 0, 0x1044)},
			map[string]any{"name": "scs", "kind": "scs", "base": "0x20000",
				"data": words(0x1044, 0x1024, 0, 0)},
		},
		"symbols": []any{
			map[string]any{"name": "f", "addr": "0x1000", "size": 32},
			map[string]any{"name": "g", "addr": "0x1020", "size": "0x20"},
			map[string]any{"name": "main", "addr": "0x1040", "size": 16},
		},
		"expect":  []any{"f", "g", "main"},
		"comment": "unknown fields are ignored",
	}
}

func encode(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestLoadValid(t *testing.T) {
	s, err := Load(bytes.NewReader(encode(t, valid())))
	if err != nil {
		t.Fatal(err)
	}
	if s.Regs != (Regs{PC: 0x1010, SP: 0x8000, X18: 0x20010, X29: 0x8000, X30: 0x1024}) {
		t.Errorf("Regs = %+v", s.Regs)
	}
	if !s.HasSCS || s.SCSBase != 0x20000 {
		t.Errorf("SCSBase = %#x, HasSCS = %v", s.SCSBase, s.HasSCS)
	}
	if s.VABits != 48 || !s.TBI {
		t.Errorf("VABits, TBI = %d, %v", s.VABits, s.TBI)
	}
	if got := s.Layout.Strip(0x005a_0000_0000_1024); got != 0x1024 {
		t.Errorf("Layout.Strip(PAC'd lr) = %#x, want 0x1024", got)
	}
	if got := s.Layout.Strip(0xab00_0000_0000_1024); got != 0xab00_0000_0000_1024 {
		t.Errorf("Layout.Strip kept no tag: %#x", got)
	}
	if v, ok := s.Memory.Load(0x8008); !ok || v != 0x1024 {
		t.Errorf("Memory.Load(0x8008) = %#x, %v", v, ok)
	}
	if r := s.SCSRegion(); r == nil || r.Name != "scs" || r.Size() != 32 {
		t.Errorf("SCSRegion = %v", r)
	}
	if st := s.StackRegions(); len(st) != 1 || st[0].Name != "stack" {
		t.Errorf("StackRegions = %v", st)
	}
	if got := strings.Join(s.Expect, ","); got != "f,g,main" {
		t.Errorf("Expect = %q", got)
	}
	if got := s.Symbols.Name(0x1024); got != "g+0x4" {
		t.Errorf("Format(0x1024) = %q", got)
	}
}

func TestLoadOptional(t *testing.T) {
	v := valid()
	delete(v, "scs_base")
	delete(v, "expect")
	delete(v["regs"].(map[string]any), "x18")
	v["regions"] = v["regions"].([]any)[:1]
	s, err := Load(bytes.NewReader(encode(t, v)))
	if err != nil {
		t.Fatal(err)
	}
	if s.HasSCS || s.SCSRegion() != nil || s.Expect != nil {
		t.Errorf("HasSCS %v, SCSRegion %v, Expect %v", s.HasSCS, s.SCSRegion(), s.Expect)
	}
}

// TestLoadErrors changes one field of a valid snapshot per case and checks
// the error's rule and the field its detail names.
func TestLoadErrors(t *testing.T) {
	regs := func(v map[string]any) map[string]any { return v["regs"].(map[string]any) }
	region := func(v map[string]any, i int) map[string]any {
		return v["regions"].([]any)[i].(map[string]any)
	}
	sym := func(v map[string]any, i int) map[string]any {
		return v["symbols"].([]any)[i].(map[string]any)
	}
	tests := []struct {
		name  string
		edit  func(v map[string]any)
		rule  string
		field string // the detail's prefix
	}{
		{"missing version", func(v map[string]any) { delete(v, "version") }, RuleMissing, "version"},
		{"version 2", func(v map[string]any) { v["version"] = 2 }, RuleBadValue, "version"},
		{"version string", func(v map[string]any) { v["version"] = "1" }, RuleBadValue, "version"},
		{"missing arch", func(v map[string]any) { delete(v, "arch") }, RuleMissing, "arch"},
		{"arch x86", func(v map[string]any) { v["arch"] = "x86_64" }, RuleBadValue, "arch"},
		{"missing va_bits", func(v map[string]any) { delete(v, "va_bits") }, RuleMissing, "va_bits"},
		{"va_bits 64", func(v map[string]any) { v["va_bits"] = 64 }, RuleBadValue, "va_bits"},
		{"va_bits 8", func(v map[string]any) { v["va_bits"] = 8 }, RuleBadValue, "va_bits"},
		{"missing tbi", func(v map[string]any) { delete(v, "tbi") }, RuleMissing, "tbi"},
		{"tbi string", func(v map[string]any) { v["tbi"] = "yes" }, RuleBadValue, "tbi"},
		{"missing regs", func(v map[string]any) { delete(v, "regs") }, RuleMissing, "regs"},
		{"missing pc", func(v map[string]any) { delete(regs(v), "pc") }, RuleMissing, "regs.pc"},
		{"missing sp", func(v map[string]any) { delete(regs(v), "sp") }, RuleMissing, "regs.sp"},
		{"missing x29", func(v map[string]any) { delete(regs(v), "x29") }, RuleMissing, "regs.x29"},
		{"missing x30", func(v map[string]any) { delete(regs(v), "x30") }, RuleMissing, "regs.x30"},
		{"missing x18 with scs_base", func(v map[string]any) { delete(regs(v), "x18") }, RuleMissing, "regs.x18"},
		{"pc no prefix", func(v map[string]any) { regs(v)["pc"] = "1010" }, RuleBadValue, "regs.pc"},
		{"pc bad digit", func(v map[string]any) { regs(v)["pc"] = "0x10g0" }, RuleBadValue, "regs.pc"},
		{"pc empty hex", func(v map[string]any) { regs(v)["pc"] = "0x" }, RuleBadValue, "regs.pc"},
		{"pc too long", func(v map[string]any) { regs(v)["pc"] = "0x10000000000000000" }, RuleBadValue, "regs.pc"},
		{"pc number", func(v map[string]any) { regs(v)["pc"] = 4096 }, RuleBadValue, "regs.pc"},
		{"sp sign", func(v map[string]any) { regs(v)["sp"] = "0x+800" }, RuleBadValue, "regs.sp"},
		{"x30 underscore", func(v map[string]any) { regs(v)["x30"] = "0x10_24" }, RuleBadValue, "regs.x30"},
		{"bad scs_base", func(v map[string]any) { v["scs_base"] = "0xscs" }, RuleBadValue, "scs_base"},
		{"missing regions", func(v map[string]any) { delete(v, "regions") }, RuleMissing, "regions"},
		{"no regions", func(v map[string]any) { v["regions"] = []any{} }, RuleMissing, "regions"},
		{"missing symbols", func(v map[string]any) { delete(v, "symbols") }, RuleMissing, "symbols"},
		{"region missing name", func(v map[string]any) { delete(region(v, 1), "name") }, RuleMissing, "regions[1].name"},
		{"region missing kind", func(v map[string]any) { delete(region(v, 0), "kind") }, RuleMissing, "regions[0].kind"},
		{"region missing base", func(v map[string]any) { delete(region(v, 0), "base") }, RuleMissing, "regions[0].base"},
		{"region missing data", func(v map[string]any) { delete(region(v, 1), "data") }, RuleMissing, "regions[1].data"},
		{"region bad base", func(v map[string]any) { region(v, 1)["base"] = "0x2000z" }, RuleBadValue, "regions[1].base"},
		{"region misaligned", func(v map[string]any) { region(v, 1)["base"] = "0x20004" }, RuleBadValue, "regions[1].base"},
		{"region bad base64", func(v map[string]any) { region(v, 0)["data"] = "!!!" }, RuleBadValue, "regions[0].data"},
		{"region empty", func(v map[string]any) { region(v, 0)["data"] = "" }, RuleBadValue, "regions[0].data"},
		{"region odd size", func(v map[string]any) { region(v, 0)["data"] = "AAAA" }, RuleBadValue, "regions[0].data"},
		{"region wraps", func(v map[string]any) { region(v, 1)["base"] = "0xfffffffffffffff8" }, RuleBadValue, "regions[1]"},
		{"regions overlap", func(v map[string]any) { region(v, 1)["base"] = "0x8018" }, RuleOverlap, "regions[1]"},
		{"sp outside", func(v map[string]any) { regs(v)["sp"] = "0x9000" }, RuleRegOutside, "regs.sp"},
		{"sp in scs", func(v map[string]any) { regs(v)["sp"] = "0x20008" }, RuleRegOutside, "regs.sp"},
		{"x29 outside", func(v map[string]any) { regs(v)["x29"] = "0x7ff0" }, RuleRegOutside, "regs.x29"},
		{"scs_base outside", func(v map[string]any) { v["scs_base"] = "0x30000" }, RuleRegOutside, "scs_base"},
		{"scs_base in stack", func(v map[string]any) { v["scs_base"] = "0x8000" }, RuleRegOutside, "scs_base"},
		{"x18 below base", func(v map[string]any) { regs(v)["x18"] = "0x1fff8" }, RuleRegOutside, "regs.x18"},
		{"x18 past end", func(v map[string]any) { regs(v)["x18"] = "0x20028" }, RuleRegOutside, "regs.x18"},
		{"symbol missing name", func(v map[string]any) { delete(sym(v, 0), "name") }, RuleMissing, "symbols[0].name"},
		{"symbol empty name", func(v map[string]any) { sym(v, 0)["name"] = "" }, RuleBadValue, "symbols[0].name"},
		{"symbol missing addr", func(v map[string]any) { delete(sym(v, 2), "addr") }, RuleMissing, "symbols[2].addr"},
		{"symbol bad addr", func(v map[string]any) { sym(v, 2)["addr"] = "main" }, RuleBadValue, "symbols[2].addr"},
		{"symbol missing size", func(v map[string]any) { delete(sym(v, 1), "size") }, RuleMissing, "symbols[1].size"},
		{"symbol negative size", func(v map[string]any) { sym(v, 1)["size"] = -1 }, RuleBadValue, "symbols[1].size"},
		{"symbol bad hex size", func(v map[string]any) { sym(v, 1)["size"] = "0xq" }, RuleBadValue, "symbols[1].size"},
		{"symbol wraps", func(v map[string]any) {
			sym(v, 1)["addr"] = "0xfffffffffffffff0"
			sym(v, 1)["size"] = 32
		}, RuleBadValue, "symbols[1].size"},
		{"expect empty name", func(v map[string]any) { v["expect"] = []any{"f", ""} }, RuleBadValue, "expect[1]"},
		{"expect not strings", func(v map[string]any) { v["expect"] = []any{1} }, RuleBadValue, "expect"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := valid()
			tt.edit(v)
			s, err := Load(bytes.NewReader(encode(t, v)))
			if err == nil {
				t.Fatalf("Load succeeded: %+v", s)
			}
			if s != nil {
				t.Errorf("Load returned a snapshot with error %v", err)
			}
			var ce *errs.CorruptError
			if !errors.As(err, &ce) || !errors.Is(err, errs.ErrCorrupt) {
				t.Fatalf("error %v (%T) is not a *CorruptError", err, err)
			}
			if ce.Rule != tt.rule {
				t.Errorf("rule %q, want %q (%v)", ce.Rule, tt.rule, err)
			}
			if !strings.HasPrefix(ce.Detail, tt.field) {
				t.Errorf("detail %q does not start with field %q", ce.Detail, tt.field)
			}
		})
	}
}

// TestLoadTooLarge checks the region size limit at its boundary (the
// streaming decoder checks it per 4 KiB of base64 and exactly at the end).
// The limit is lowered from 64 MiB to keep the test fast; the arithmetic
// does not depend on it (limits_test.go runs the real one).
func TestLoadTooLarge(t *testing.T) {
	good := string(encode(t, valid()))
	old := `"` + words(0x1044, 0x1024, 0, 0) + `"`
	try := func(n int) error {
		big := `"` + base64.StdEncoding.EncodeToString(make([]byte, n)) + `"`
		_, err := Load(strings.NewReader(strings.Replace(good, old, big, 1)))
		return err
	}
	check := func(limit int) {
		for _, n := range []int{limit + 1, limit + 8, limit + 1000} {
			err := try(n)
			var ce *errs.CorruptError
			if !errors.As(err, &ce) || ce.Rule != RuleTooLarge || !strings.HasPrefix(ce.Detail, "regions[1].data") {
				t.Errorf("limit %d, %d bytes: error %v, want rule %q on regions[1].data", limit, n, err, RuleTooLarge)
			}
		}
		if err := try(limit); err != nil {
			t.Errorf("limit %d, exactly the limit: %v", limit, err)
		}
	}
	defer func(old int) { maxRegion = old }(maxRegion)
	for _, limit := range []int{1024, 1024 + 8, 4096 + 16} {
		maxRegion = limit
		check(limit)
	}
}

func TestLoadSyntax(t *testing.T) {
	good := string(encode(t, valid()))
	for _, in := range []string{
		"",
		"{",
		"[]",
		"null",
		`{"version": 1,}`,
		good[:len(good)/2],
		good + " {}",
		good + " x",
	} {
		_, err := Load(strings.NewReader(in))
		var ce *errs.CorruptError
		if !errors.As(err, &ce) {
			t.Errorf("Load(%.30q): error %v, want a *CorruptError", in, err)
		}
	}
}

// TestLoadCommitted loads every committed capture and checks what the
// capture program guarantees: an SCS, registers in place, the symbols the
// expect chain names, and PACs that strip to symbolized addresses.
func TestLoadCommitted(t *testing.T) {
	files, err := filepath.Glob("../../testdata/arm64/snapshots/*.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 30 {
		t.Fatalf("found %d committed snapshots, want at least 30", len(files))
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			s := loadFile(t, path)
			if !s.HasSCS || s.SCSRegion() == nil {
				t.Fatal("no shadow call stack")
			}
			if len(s.Expect) < 5 {
				t.Fatalf("expect chain %v too short", s.Expect)
			}
			if got := s.Symbols.Func(s.Regs.PC); got != s.Expect[0] {
				t.Errorf("pc %#x symbolizes to %q, want %q", s.Regs.PC, got, s.Expect[0])
			}
			for _, name := range s.Expect {
				if !hasSymbol(s.Symbols, name) {
					t.Errorf("expect names %q, not among the symbols", name)
				}
			}
			if s.Symbols.Func(s.Layout.Strip(s.Regs.X30)) == "" {
				t.Errorf("x30 %#x does not strip to a symbol", s.Regs.X30)
			}
			// Every used SCS slot is a return address whose PAC, if any,
			// lies in bits 54:48; PACs appear exactly when the binary
			// signs and the CPU has PAuth.
			signed := 0
			for a := s.SCSBase; a < s.Regs.X18; a += 8 {
				v, ok := s.Memory.Load(a)
				if !ok {
					t.Fatalf("SCS slot %#x unreadable", a)
				}
				if v&^(1<<55-1) != 0 {
					t.Errorf("SCS slot %#x = %#x: bits above 54 set", a, v)
				}
				if v>>48 != 0 {
					signed++
				}
				if s.Symbols.Func(s.Layout.Strip(v)) == "" {
					t.Errorf("SCS slot %#x = %#x does not strip to a symbol", a, v)
				}
			}
			name := filepath.Base(path)
			wantSigned := !strings.Contains(name, "-nopac-") && !strings.Contains(name, "-nopauth-")
			if wantSigned != (signed > 0) {
				t.Errorf("%d signed SCS entries, want signed entries: %v", signed, wantSigned)
			}
		})
	}
}

func hasSymbol(s *Symbolizer, name string) bool {
	for _, sym := range s.Symbols() {
		if sym.Name == name {
			return true
		}
	}
	return false
}

func loadFile(t testing.TB, path string) *Snapshot {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s, err := Load(f)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func FuzzLoad(f *testing.F) {
	f.Add(encode(f, valid()))
	if b, err := os.ReadFile("../../testdata/arm64/snapshots/clang-pacret-pauth-signal.json"); err == nil {
		f.Add(b)
	}
	f.Add([]byte(`{"version":1,"arch":"arm64","va_bits":39,"tbi":false,"regs":{"pc":"0x0","sp":"0x10","x29":"0x0","x30":"0x0"},"regions":[{"name":"s","kind":"stack","base":"0x10","data":"AAAAAAAAAAA="}],"symbols":[]}`))
	f.Add([]byte(`{"version":1,"x":[{"a":"\u00e9\ud83d\ude00"},-1.5e+3,true,null],"symbols":[{"size":"0x10"}]}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		s, err := Load(bytes.NewReader(in))
		// The token reader agrees with encoding/json on what is JSON
		// (beyond its documented limits: nesting, number length).
		var ce *errs.CorruptError
		syntax := errors.As(err, &ce) && ce.Rule == RuleSyntax
		if valid := json.Valid(in); valid && syntax && !strings.Contains(ce.Detail, "nesting") &&
			!strings.Contains(ce.Detail, "number longer") {
			t.Fatalf("encoding/json accepts the document, Load: %v", err)
		} else if !valid && err == nil {
			t.Fatalf("encoding/json rejects the document, Load accepts it")
		}
		if !checkLoaded(t, s, err) {
			return
		}
		for _, sym := range s.Symbols.Symbols() {
			got, _, ok := s.Symbols.Lookup(sym.Addr)
			if !ok || got.Addr > sym.Addr {
				t.Fatalf("Lookup(%#x) = %+v, %v", sym.Addr, got, ok)
			}
		}
	})
}

// checkLoaded checks what Load promises for one result: an error is
// alone and wraps ErrCorrupt; a loaded snapshot has sp in a stack
// region, x18 within its shadow stack, and regions that do not
// overlap. It reports whether s was loaded. Both fuzz targets of Load
// check it.
func checkLoaded(t *testing.T, s *Snapshot, err error) bool {
	t.Helper()
	if err != nil {
		if s != nil {
			t.Fatal("snapshot with error")
		}
		if !errors.Is(err, errs.ErrCorrupt) {
			t.Fatalf("error %v does not wrap ErrCorrupt", err)
		}
		return false
	}
	if r := s.Memory.Find(s.Regs.SP); r == nil || r.Kind != KindStack {
		t.Fatalf("sp %#x not in a stack region", s.Regs.SP)
	}
	if s.HasSCS {
		r := s.SCSRegion()
		if r == nil || r.Kind != KindSCS || s.Regs.X18 < s.SCSBase || s.Regs.X18 > r.End() {
			t.Fatalf("x18 %#x / scs_base %#x inconsistent with %v", s.Regs.X18, s.SCSBase, r)
		}
	}
	rs := s.Memory.Regions()
	for i := 1; i < len(rs); i++ {
		if rs[i-1].End() > rs[i].Base {
			t.Fatalf("regions overlap: %v %v", rs[i-1], rs[i])
		}
	}
	return true
}
