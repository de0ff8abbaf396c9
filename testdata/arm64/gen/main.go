// Command gen makes snapshot files, format version 1 (see
// testdata/README.md), in two ways.
//
// Any arm64 Linux program (static or dynamically linked, PIE or not): gen
// runs it under qemu-aarch64 -g, stops it with gdb-multiarch at a capture
// point and records the registers, the stack, the shadow call stack (if the
// program has one), the function symbols of the executable and of every
// shared library moved by its load bias, the expected chain given on the
// command line, and gdb's own backtrace at the same point (field "gdb",
// ignored by the loader) for comparison:
//
//	go run ./testdata/arm64/gen -run ./prog -args "qsort" -break capture_here \
//	    -scs-base g_scs_base -expect capture_here,cmp_ints,...,_start -o out.json
//
// -break is any gdb location (a function: after its prologue; *ADDR: that
// instruction), -hit N stops at its Nth hit, -finish captures in the caller
// once the function at -break has returned, -scs-base is a C expression
// gdb evaluates at the stop for the shadow call stack's base (omit it for
// a program without one), -cpu the QEMU CPU (default max,pauth=off,sve=off:
// gdb 13 reads neither PACs nor QEMU 7.2's SVE signal frames), -sysroot the
// libraries' root (default /usr/aarch64-linux-gnu).
//
// The test program of testdata/arm64/src writes a raw dump itself; gen
// converts it, with the ELF file's function symbols and the known call
// chain of the dump's scenario:
//
//	go run ./testdata/arm64/gen -elf prog.elf -dump capture.bin -o out.json \
//	    -compiler "clang 14.0.6" -cflags "..." -qemu "qemu-aarch64 7.2 -cpu max"
//
// gen also walks the frame records and the shadow call stack of the dump
// itself (stripping PACs for a 48-bit VA with TBI, as QEMU's user mode
// uses) and prints the symbolized chains, so a broken capture is noticed
// when it is made.
package main

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"sort"
	"strings"
)

type hexU64 uint64

func (h hexU64) MarshalJSON() ([]byte, error) {
	return []byte(fmt.Sprintf(`"%#x"`, uint64(h))), nil
}

type regs struct {
	PC  hexU64 `json:"pc"`
	SP  hexU64 `json:"sp"`
	X18 hexU64 `json:"x18"`
	X29 hexU64 `json:"x29"`
	X30 hexU64 `json:"x30"`
}

type region struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
	Base hexU64 `json:"base"`
	Data []byte `json:"data"` // encoding/json writes standard base64
}

type symbol struct {
	Name string `json:"name"`
	Addr hexU64 `json:"addr"`
	Size uint64 `json:"size"`
}

type source struct {
	Scenario  string   `json:"scenario"`
	Program   string   `json:"program"`
	Binary    string   `json:"binary"`
	Compiler  string   `json:"compiler"`
	CFlags    string   `json:"cflags"`
	QEMU      string   `json:"qemu"`
	Note      string   `json:"note,omitempty"`
	Break     string   `json:"break,omitempty"`
	Hit       int      `json:"hit,omitempty"`
	Finish    bool     `json:"finish,omitempty"`
	Libraries []string `json:"libraries,omitempty"`
}

type snapshot struct {
	Version int      `json:"version"`
	Arch    string   `json:"arch"`
	VABits  int      `json:"va_bits"`
	TBI     bool     `json:"tbi"`
	Regs    regs     `json:"regs"`
	SCSBase *hexU64  `json:"scs_base,omitempty"`
	Regions []region `json:"regions"`
	Symbols []symbol `json:"symbols"`
	Expect  []string `json:"expect,omitempty"`
	GDB     *gdbRef  `json:"gdb,omitempty"`
	Source  source   `json:"source"`
}

// expect returns the known call chain of a scenario, innermost first. It
// mirrors testdata/arm64/src/chain.c, leaf.c and rt.c.
func expect(scenario string) ([]string, string, error) {
	tail := []string{"main", "_start"}
	switch scenario {
	case "chain":
		return append([]string{"capture", "shape_args", "shape_vla", "shape_callee", "shape_big", "chain_root"}, tail...),
			"plain chain: frames with stack arguments, a VLA, all callee-saved registers, 2 KiB of locals", nil
	case "leaf":
		return append([]string{"capture_leaf", "leaf_mid", "leaf_root"}, tail...),
			"innermost function is a leaf without frame record or SCS push: leaf_mid is only in x30", nil
	case "recurse":
		c := []string{"capture"}
		for range 8 {
			c = append(c, "rec")
		}
		return append(append(c, "rec_root"), tail...), "self recursion, depth 8", nil
	case "deep":
		c := []string{"capture"}
		// deep_root calls ping(130); ping(n) calls pong(n-1) and so on,
		// so the function with argument n is ping when n is even.
		for n := 1; n <= 130; n++ {
			if n%2 == 0 {
				c = append(c, "ping")
			} else {
				c = append(c, "pong")
			}
		}
		return append(append(c, "deep_root"), tail...), "mutual recursion ping/pong, depth 130 (134 frames)", nil
	case "signal":
		return append([]string{"capture", "handler_mid", "on_signal", "sigreturn_tramp", "sig_raise", "sig_mid", "sig_root"}, tail...),
			"capture inside a SIGUSR1 handler on sigaltstack; sig_raise was interrupted right after its rt_sigqueueinfo svc; its x30 points into itself", nil
	}
	return nil, "", fmt.Errorf("unknown scenario %q", scenario)
}

type dump struct {
	scenario string
	r        regs
	scsBase  uint64
	regions  []region
}

func readDump(b []byte) (*dump, error) {
	rd := bytes.NewReader(b)
	var hdr [40]byte
	if _, err := io.ReadFull(rd, hdr[:]); err != nil {
		return nil, err
	}
	if string(hdr[:8]) != "UKSNAP01" {
		return nil, errors.New("bad dump magic")
	}
	d := &dump{scenario: cstr(hdr[8:])}
	var w [7]uint64 // pc sp x18 x29 x30 scs_base nregions
	if err := binary.Read(rd, binary.LittleEndian, &w); err != nil {
		return nil, err
	}
	d.r = regs{hexU64(w[0]), hexU64(w[1]), hexU64(w[2]), hexU64(w[3]), hexU64(w[4])}
	d.scsBase = w[5]
	for range w[6] {
		var rh [32]byte
		var bs [2]uint64
		if _, err := io.ReadFull(rd, rh[:]); err != nil {
			return nil, err
		}
		if err := binary.Read(rd, binary.LittleEndian, &bs); err != nil {
			return nil, err
		}
		data := make([]byte, bs[1])
		if _, err := io.ReadFull(rd, data); err != nil {
			return nil, err
		}
		d.regions = append(d.regions, region{Name: cstr(rh[:16]), Kind: cstr(rh[16:]), Base: hexU64(bs[0]), Data: data})
	}
	if rd.Len() != 0 {
		return nil, fmt.Errorf("%d trailing bytes in dump", rd.Len())
	}
	return d, nil
}

func ptr[T any](v T) *T { return &v }

func cstr(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

func readSymbols(path string) ([]symbol, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		return nil, err
	}
	var out []symbol
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Value == 0 {
			continue
		}
		out = append(out, symbol{Name: s.Name, Addr: hexU64(s.Value), Size: s.Size})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Addr < out[j].Addr })
	return out, nil
}

// strip removes a PAC for QEMU user mode: 48-bit VA, TBI, bit 55 clear.
func strip(v uint64) uint64 { return v & (1<<48 - 1) }

func symName(syms []symbol, pc uint64) string {
	for _, s := range syms {
		if pc >= uint64(s.Addr) && pc < uint64(s.Addr)+s.Size {
			return s.Name
		}
	}
	return fmt.Sprintf("?%#x", pc)
}

func load(regs []region, addr uint64) (uint64, bool) {
	for _, r := range regs {
		if addr >= uint64(r.Base) && addr+8 <= uint64(r.Base)+uint64(len(r.Data)) {
			return binary.LittleEndian.Uint64(r.Data[addr-uint64(r.Base):]), true
		}
	}
	return 0, false
}

// checkWalks prints the frame-record chain and the SCS entries,
// symbolized, as a quick check of the capture.
func checkWalks(d *dump, syms []symbol) (fp, scs []string) {
	fp = []string{symName(syms, uint64(d.r.PC))}
	for a, n := uint64(d.r.X29), 0; a != 0 && n < 1000; n++ {
		next, ok1 := load(d.regions, a)
		lr, ok2 := load(d.regions, a+8)
		if !ok1 || !ok2 {
			fp = append(fp, fmt.Sprintf("<unreadable %#x>", a))
			break
		}
		fp = append(fp, symName(syms, strip(lr)))
		a = next
	}
	for a := uint64(d.r.X18) - 8; a >= d.scsBase && a < uint64(d.r.X18); a -= 8 {
		v, ok := load(d.regions, a)
		if !ok {
			scs = append(scs, fmt.Sprintf("<unreadable %#x>", a))
			break
		}
		scs = append(scs, symName(syms, strip(v)))
	}
	return fp, scs
}

func main() {
	elfPath := flag.String("elf", "", "the program's ELF file")
	dumpPath := flag.String("dump", "", "the raw capture dump")
	out := flag.String("o", "", "output JSON file")
	binName := flag.String("binary", "", "binary name recorded in the snapshot")
	compiler := flag.String("compiler", "", "compiler and version")
	cflags := flag.String("cflags", "", "compiler flags")
	qemu := flag.String("qemu", "", "qemu command")
	var rc runConfig
	flag.StringVar(&rc.prog, "run", "", "run mode: the arm64 program to capture")
	flag.StringVar(&rc.args, "args", "", "run mode: the program's arguments")
	flag.StringVar(&rc.brk, "break", "", "run mode: the capture point, a gdb location")
	flag.IntVar(&rc.hit, "hit", 1, "run mode: capture at this hit of the breakpoint")
	flag.BoolVar(&rc.finish, "finish", false, "run mode: capture after the function at -break returns (gdb finish)")
	flag.StringVar(&rc.scsExpr, "scs-base", "", "run mode: C expression for the shadow call stack's base")
	flag.StringVar(&rc.cpu, "cpu", "max,pauth=off,sve=off", "run mode: QEMU CPU")
	flag.StringVar(&rc.sysroot, "sysroot", "/usr/aarch64-linux-gnu", "run mode: root of the arm64 libraries")
	flag.StringVar(&rc.expect, "expect", "", "run mode: the expected chain, innermost first, comma-separated")
	flag.StringVar(&rc.note, "note", "", "run mode: a note for the source field")
	flag.Uint64Var(&rc.stackMax, "stack-max", 1<<20, "run mode: most bytes of stack to capture above sp")
	flag.Parse()
	if rc.prog != "" {
		rc.out, rc.binName = *out, *binName
		if rc.binName == "" {
			rc.binName = rc.prog
		}
		if rc.brk == "" || rc.out == "" {
			log.Fatal("gen -run needs -break and -o")
		}
		if err := runMode(rc); err != nil {
			log.Fatal(err)
		}
		return
	}
	if *elfPath == "" || *dumpPath == "" || *out == "" {
		flag.Usage()
		os.Exit(2)
	}
	raw, err := os.ReadFile(*dumpPath)
	if err != nil {
		log.Fatal(err)
	}
	d, err := readDump(raw)
	if err != nil {
		log.Fatalf("%s: %v", *dumpPath, err)
	}
	syms, err := readSymbols(*elfPath)
	if err != nil {
		log.Fatal(err)
	}
	exp, note, err := expect(d.scenario)
	if err != nil {
		log.Fatal(err)
	}
	s := snapshot{
		Version: 1, Arch: "arm64", VABits: 48, TBI: true,
		Regs: d.r, SCSBase: ptr(hexU64(d.scsBase)), Regions: d.regions, Symbols: syms, Expect: exp,
		Source: source{Scenario: d.scenario, Program: "testdata/arm64/src", Binary: *binName,
			Compiler: *compiler, CFlags: *cflags, QEMU: *qemu, Note: note},
	}
	b, err := json.MarshalIndent(s, "", "\t")
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(*out, append(b, '\n'), 0o644); err != nil {
		log.Fatal(err)
	}
	fp, scs := checkWalks(d, syms)
	fmt.Printf("%s\n  expect %s\n  fp     %s\n  scs    %s\n", *out, strings.Join(exp, " "), strings.Join(fp, " "), strings.Join(scs, " "))
}
