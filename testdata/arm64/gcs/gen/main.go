// Command gen turns what gcscapture.py recorded at a stop of the GCS test
// program (testdata/arm64/gcs/src) into a snapshot, format version 1 with
// the guarded control stack (testdata/README.md): the registers with
// regs.gcspr, the stack, shadow call stack and GCS regions, the function
// symbols of the static ELF file that some captured word or register
// points into, the scenario's known chain and gdb's backtrace (field
// "gdb", ignored by the loader). It also writes gdb's "bt" as text.
//
//	go run ./testdata/arm64/gcs/gen -raw raw.json -elf gcs.elf -scenario chain \
//	    -expect capture_here,chain_d,... -o chain.json -bt chain.bt.txt
package main

import (
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"sort"
	"strings"
)

type hexU64 uint64

func (h hexU64) MarshalJSON() ([]byte, error) { return []byte(fmt.Sprintf(`"%#x"`, uint64(h))), nil }

type regs struct {
	PC    hexU64 `json:"pc"`
	SP    hexU64 `json:"sp"`
	X18   hexU64 `json:"x18"`
	X29   hexU64 `json:"x29"`
	X30   hexU64 `json:"x30"`
	GCSPR hexU64 `json:"gcspr"`
}

type region struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
	Base hexU64 `json:"base"`
	Data []byte `json:"data"`
}

type symbol struct {
	Name string `json:"name"`
	Addr hexU64 `json:"addr"`
	Size uint64 `json:"size"`
}

type gdbFrame struct {
	PC   hexU64 `json:"pc"`
	Func string `json:"func"`
	Type string `json:"type"`
}

type snapshot struct {
	Version int       `json:"version"`
	Arch    string    `json:"arch"`
	VABits  int       `json:"va_bits"`
	TBI     bool      `json:"tbi"`
	Regs    regs      `json:"regs"`
	SCSBase *hexU64   `json:"scs_base,omitempty"`
	Regions []region  `json:"regions"`
	Symbols []symbol  `json:"symbols"`
	Expect  []string  `json:"expect,omitempty"`
	GDB     gdbRef    `json:"gdb"`
	Source  sourceRef `json:"source"`
}

type gdbRef struct {
	Version   string     `json:"version"`
	Backtrace []gdbFrame `json:"backtrace"`
}

type sourceRef struct {
	Scenario string `json:"scenario"`
	Binary   string `json:"binary"`
	Compiler string `json:"compiler"`
	QEMU     string `json:"qemu"`
	GCSCRE0  hexU64 `json:"gcscre0_el1"`
	Note     string `json:"note,omitempty"`
}

type hexRegion struct {
	Base uint64 `json:"base"`
	Hex  string `json:"hex"`
}

type raw struct {
	Regs    map[string]uint64 `json:"regs"`
	GCSCRE0 uint64            `json:"gcscre0"`
	Stack   *hexRegion        `json:"stack"`
	SCS     *hexRegion        `json:"scs"`
	GCS     *hexRegion        `json:"gcs"`
	GDB     string            `json:"gdb_version"`
	BT      []struct {
		PC   uint64 `json:"pc"`
		Func string `json:"func"`
		Type string `json:"type"`
	} `json:"bt"`
	BTText string `json:"bt_text"`
}

// funcSymbols returns the ELF file's function symbols, by address.
func funcSymbols(path string) ([]symbol, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []symbol
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Section == elf.SHN_UNDEF || s.Value == 0 {
			continue
		}
		k := fmt.Sprintf("%s@%x", s.Name, s.Value)
		if !seen[k] {
			seen[k] = true
			out = append(out, symbol{Name: s.Name, Addr: hexU64(s.Value), Size: s.Size})
		}
	}
	// By address, aliases by name: the snapshot's symbolizer names an
	// address by the first of equal symbols, the same one in every run.
	sort.Slice(out, func(i, j int) bool {
		if out[i].Addr != out[j].Addr {
			return out[i].Addr < out[j].Addr
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}

func main() {
	rawPath := flag.String("raw", "", "what gcscapture.py wrote")
	elfPath := flag.String("elf", "", "the program's ELF file")
	out := flag.String("o", "", "the snapshot to write")
	btOut := flag.String("bt", "", "where to write gdb's bt text")
	scenario := flag.String("scenario", "", "the scenario")
	exp := flag.String("expect", "", "the known chain, innermost first, comma-separated")
	binName := flag.String("binary", "", "the binary's name in the repository")
	compiler := flag.String("compiler", "", "compiler, version and flags")
	qemu := flag.String("qemu", "", "the QEMU command")
	note := flag.String("note", "", "a note")
	flag.Parse()
	b, err := os.ReadFile(*rawPath)
	if err != nil {
		log.Fatal(err)
	}
	var r raw
	if err := json.Unmarshal(b, &r); err != nil {
		log.Fatal(err)
	}
	all, err := funcSymbols(*elfPath)
	if err != nil {
		log.Fatal(err)
	}
	s := snapshot{Version: 1, Arch: "arm64", VABits: 48, TBI: true,
		Regs: regs{hexU64(r.Regs["pc"]), hexU64(r.Regs["sp"]), hexU64(r.Regs["x18"]), hexU64(r.Regs["x29"]),
			hexU64(r.Regs["x30"]), hexU64(r.Regs["gcspr"])}}
	add := func(name, kind string, h *hexRegion) {
		if h == nil {
			return
		}
		d, err := hex.DecodeString(h.Hex)
		if err != nil {
			log.Fatal(err)
		}
		s.Regions = append(s.Regions, region{name, kind, hexU64(h.Base), d})
	}
	add("stack", "stack", r.Stack)
	if r.SCS != nil {
		add("scs", "scs", r.SCS)
		b := hexU64(r.SCS.Base)
		s.SCSBase = &b
	}
	add("gcs", "gcs", r.GCS)

	// Keep the symbols some captured word or register points into, and
	// those the known chain names.
	want := map[string]bool{}
	if *exp != "" {
		s.Expect = strings.Split(*exp, ",")
		for _, e := range s.Expect {
			want[e] = true
		}
	}
	hit := make([]bool, len(all))
	mark := func(v uint64) {
		i := sort.Search(len(all), func(i int) bool { return uint64(all[i].Addr) > v }) - 1
		if i >= 0 && v < uint64(all[i].Addr)+max(all[i].Size, 1) {
			for j := i; j >= 0 && all[j].Addr == all[i].Addr; j-- { // and its aliases
				hit[j] = true
			}
		}
	}
	for _, v := range r.Regs {
		mark(v)
	}
	for _, g := range s.Regions {
		for o := 0; o+8 <= len(g.Data); o += 8 {
			mark(binary.LittleEndian.Uint64(g.Data[o:]))
		}
	}
	for _, f := range r.BT {
		mark(f.PC)
	}
	for i, sym := range all {
		if hit[i] || want[sym.Name] {
			s.Symbols = append(s.Symbols, sym)
		}
	}
	s.GDB.Version = r.GDB
	for _, f := range r.BT {
		s.GDB.Backtrace = append(s.GDB.Backtrace, gdbFrame{hexU64(f.PC), f.Func, f.Type})
	}
	s.Source = sourceRef{Scenario: *scenario, Binary: *binName, Compiler: *compiler, QEMU: *qemu,
		GCSCRE0: hexU64(r.GCSCRE0), Note: *note}
	j, err := json.MarshalIndent(s, "", "\t")
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(*out, append(j, '\n'), 0o644); err != nil {
		log.Fatal(err)
	}
	if *btOut != "" {
		if err := os.WriteFile(*btOut, []byte(r.BTText), 0o644); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Printf("%s: %d symbols of %d, gcspr %#x, gdb %d frames\n", *out, len(s.Symbols), len(all), r.Regs["gcspr"], len(r.BT))
}
