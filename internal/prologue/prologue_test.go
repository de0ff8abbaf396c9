package prologue

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/unwindkit/unwindkit/internal/snapshot"
	"golang.org/x/arch/arm64/arm64asm"
)

const binDir = "../../testdata/arm64/bin"

func code(ws ...uint32) []byte {
	b := make([]byte, 4*len(ws))
	for i, w := range ws {
		binary.LittleEndian.PutUint32(b[4*i:], w)
	}
	return b
}

// TestEncodings checks the exact-match constants against arm64asm's
// decoder (GNU syntax), so a typo in an encoding cannot hide.
func TestEncodings(t *testing.T) {
	for w, want := range map[uint32]string{
		insnSCSPush: "str x30, [x18],#8", // arm64asm prints no space before #
		insnSCSPop:  "ldr x30, [x18,#-8]!",
		insnMovX9LR: "mov x9, x30",
		0xd503233f:  "hint #0x19", // paciasp
		0xd503237f:  "hint #0x1b", // pacibsp
		0xd50323bf:  "hint #0x1d", // autiasp
		0xd50323ff:  "hint #0x1f", // autibsp
		0xd503245f:  "hint #0x22", // bti c
	} {
		in, err := arm64asm.Decode(code(w))
		if err != nil {
			t.Errorf("%#08x: %v", w, err)
			continue
		}
		if got := arm64asm.GNUSyntax(in); got != want {
			t.Errorf("%#08x decodes to %q, want %q", w, got, want)
		}
	}
	// arm64asm does not know the v8.3 instructions matched by encoding.
	for _, w := range []uint32{insnRETAA, insnRETAB, 0xd73f0810, 0xd63f081f} {
		if _, err := arm64asm.Decode(code(w)); err == nil {
			t.Errorf("%#08x now decodes: the matcher could use arm64asm", w)
		}
	}
}

func TestScanCode(t *testing.T) {
	const (
		paciasp   = 0xd503233f
		pacibsp   = 0xd503237f
		autiasp   = 0xd50323bf
		autibsp   = 0xd50323ff
		paciaz    = 0xd503231f
		btic      = 0xd503245f
		nop       = 0xd503201f
		stpPre    = 0xa9bf7bfd // stp x29, x30, [sp, #-16]!
		stpOff    = 0xa9047bfd // stp x29, x30, [sp, #64]
		stpX19    = 0xa9bf53f3 // stp x19, x20, [sp, #-16]!
		movX29SP  = 0x910003fd // mov x29, sp
		addX29SP  = 0x910103fd // add x29, sp, #0x40
		ldpPost   = 0xa8c17bfd // ldp x29, x30, [sp], #16
		ret       = 0xd65f03c0
		bl        = 0x94000010 // bl .+0x40
		blrX8     = 0xd63f0100
		blraa     = 0xd73f0810 // blraa x0, x16
		blrabz    = 0xd63f0c3f // blrabz x1
		subSP     = 0xd10083ff // sub sp, sp, #0x20
		movX29X0  = 0xaa0003fd // mov x29, x0
		undefined = 0x00000000 // udf #0
	)
	tests := []struct {
		name string
		code []uint32
		want Func
	}{
		{"empty", nil, Func{}},
		{"leaf ret", []uint32{ret}, Func{}},
		{"scs frame A", []uint32{paciasp, insnSCSPush, stpPre, movX29SP, bl, ldpPost, insnSCSPop, autiasp, ret},
			Func{SCSPush: true, SCSPop: true, Sign: KeyA, Auth: KeyA, SignBeforePush: true, FrameRecord: true, Calls: 1}},
		{"push before sign", []uint32{insnSCSPush, pacibsp, stpPre, movX29SP, blrX8, ldpPost, autibsp, insnSCSPop, ret},
			Func{SCSPush: true, SCSPop: true, Sign: KeyB, Auth: KeyB, FrameRecord: true, Calls: 1}},
		{"retab", []uint32{pacibsp, stpPre, movX29SP, blraa, ldpPost, insnRETAB},
			Func{Sign: KeyB, Auth: KeyB, FrameRecord: true, Calls: 1}},
		{"retaa zero modifier", []uint32{paciaz, stpPre, movX29SP, blrabz, ldpPost, insnRETAA},
			Func{Sign: KeyA, Auth: KeyA, FrameRecord: true, Calls: 1}},
		{"big frame record at offset", []uint32{subSP, stpOff, addX29SP, bl, bl},
			Func{FrameRecord: true, Calls: 2}},
		{"mov x29 without pair", []uint32{stpX19, movX29SP, bl}, Func{Calls: 1}},
		{"pair without x29 = sp", []uint32{stpPre, movX29X0, bl}, Func{Calls: 1}},
		{"x29 = sp before pair", []uint32{movX29SP, stpPre, bl}, Func{Calls: 1}},
		{"bti and patchable nops", []uint32{btic, nop, nop, paciasp, insnSCSPush, stpPre, movX29SP, nop, bl},
			Func{BTI: true, EntryNOPs: 2, Sign: KeyA, SCSPush: true, SignBeforePush: true, FrameRecord: true, Calls: 1}},
		{"ftrace patched", []uint32{insnMovX9LR, bl, paciasp, stpPre, movX29SP},
			Func{FtraceMovX9: true, Calls: 1, Sign: KeyA, FrameRecord: true}},
		{"mov x9, x30 late", []uint32{nop, nop, nop, nop, insnMovX9LR}, Func{EntryNOPs: 4}},
		{"undefined words", []uint32{undefined, nop, undefined}, Func{Unknown: 2}},
		// Register 31 of orr is xzr: x29 = 0 is no frame record.
		{"mov x29, xzr", []uint32{stpPre, 0xaa1f03fd, bl}, Func{Calls: 1}},
		{"pacia x30, sp", []uint32{0xdac103fe, stpPre, movX29SP, bl, ldpPost, 0xdac113fe, ret},
			Func{Sign: KeyA, Auth: KeyA, FrameRecord: true, Calls: 1}},
		{"pacib x30, sp", []uint32{0xdac107fe, insnSCSPush, 0xdac117fe}, Func{Sign: KeyB, Auth: KeyB, SCSPush: true, SignBeforePush: true}},
		{"paciza x30", []uint32{0xdac123fe, 0xdac137fe}, Func{Sign: KeyA, Auth: KeyB}},
		{"pacia x16, sp", []uint32{0xdac103f0, 0xdac113f0}, Func{}},
		{"nops then bti", []uint32{nop, nop, btic, paciasp}, Func{EntryNOPs: 2, BTI: true, Sign: KeyA}},
		{"bti in body", []uint32{stpPre, btic}, Func{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := code(tt.code...)
			got := ScanCode("f", 0x1000, c)
			tt.want.Name, tt.want.Addr, tt.want.Size = "f", 0x1000, uint64(len(c))
			if got != tt.want {
				t.Errorf("ScanCode:\n got %+v\nwant %+v", got, tt.want)
			}
			if got.Leaf() != (tt.want.Calls == 0) {
				t.Errorf("Leaf() = %v", got.Leaf())
			}
		})
	}
	// A trailing partial word is ignored.
	if f := ScanCode("f", 0, append(code(bl), 0x94)); f.Calls != 1 || f.Unknown != 0 {
		t.Errorf("partial word: %+v", f)
	}
}

// instrumented lists the functions of testdata/arm64/src built with
// -fsanitize=shadow-call-stack that make calls.
var instrumented = []string{
	"capture", "warm", "shape_args", "shape_vla", "shape_callee", "shape_big", "chain_root",
	"rec", "rec_root", "ping", "pong", "deep_root", "sig_raise", "sig_mid", "sig_root",
	"handler_mid", "on_signal", "leaf_mid", "leaf_root",
}

// TestCommittedBinaries checks the scanner against what the build flags of
// each committed test binary guarantee.
func TestCommittedBinaries(t *testing.T) {
	files, err := filepath.Glob(binDir + "/[cg]*-*.elf")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 8 {
		t.Fatalf("found %d test binaries, want 8", len(files))
	}
	for _, path := range files {
		name := strings.TrimSuffix(filepath.Base(path), ".elf")
		t.Run(name, func(t *testing.T) {
			b, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			key := KeyNone
			switch {
			case strings.HasSuffix(name, "-pacret"), strings.HasSuffix(name, "-pfe"):
				key = KeyA
			case strings.HasSuffix(name, "-pacretb"):
				key = KeyB
			}
			pfe := strings.HasSuffix(name, "-pfe")
			get := func(fn string) Func {
				f, ok := b.Func(fn)
				if !ok {
					t.Fatalf("no function %s", fn)
				}
				return f
			}
			for _, fn := range instrumented {
				f := get(fn)
				if !f.SCSPush || !f.SCSPop || !f.FrameRecord || f.Leaf() || f.Unknown != 0 {
					t.Errorf("%s: %+v, want SCS push and pop, frame record, calls", fn, f)
				}
				if f.Sign != key || f.Auth != key || f.SignBeforePush != (key != KeyNone) {
					t.Errorf("%s: sign %v auth %v before push %v, want key %v", fn, f.Sign, f.Auth, f.SignBeforePush, key)
				}
				if wantNOPs := map[bool]int{true: 2}[pfe]; f.EntryNOPs != wantNOPs || f.BTI != pfe {
					t.Errorf("%s: %d entry NOPs, BTI %v; want %d, %v", fn, f.EntryNOPs, f.BTI, wantNOPs, pfe)
				}
				if f.FtraceMovX9 {
					t.Errorf("%s: mov x9, x30 in an unpatched binary", fn)
				}
			}
			// The leaf capture pushes nothing, builds no record and, as
			// pac-ret only signs non-leaf functions, signs nothing.
			if f := get("capture_leaf"); !f.Leaf() || f.SCSPush || f.SCSPop || f.FrameRecord || f.Sign != KeyNone {
				t.Errorf("capture_leaf: %+v", f)
			}
			// main is not instrumented but has a frame record.
			if f := get("main"); f.SCSPush || f.SCSPop || !f.FrameRecord || f.Sign != key || f.Leaf() {
				t.Errorf("main: %+v", f)
			}
			if f := get("sigreturn_tramp"); !f.Leaf() || f.FrameRecord || f.Size != 8 {
				t.Errorf("sigreturn_tramp: %+v", f)
			}
			if f := get("_start"); f.Calls != 1 || f.FrameRecord {
				t.Errorf("_start: %+v", f)
			}
			// FuncAt agrees with the function list.
			for _, f := range b.Funcs() {
				if g, ok := b.FuncAt(f.Addr + f.Size - 1); !ok || g.Name != f.Name {
					t.Errorf("FuncAt(%#x) = %s, %v; want %s", f.Addr+f.Size-1, g.Name, ok, f.Name)
				}
			}
		})
	}
}

// TestCallBeforeSnapshots checks every return address the two unwinders
// read from each committed snapshot, against the snapshot's own binary:
// the instruction before each is a bl, except the signal trampoline's
// address, which the kernel (here QEMU) put in x30, not a call.
func TestCallBeforeSnapshots(t *testing.T) {
	files, err := filepath.Glob("../../testdata/arm64/snapshots/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no snapshots: %v", err)
	}
	bins := map[string]*Binary{}
	for _, path := range files {
		base := filepath.Base(path)
		parts := strings.SplitN(base, "-", 3)
		elfName := parts[0] + "-" + parts[1] + ".elf"
		b := bins[elfName]
		if b == nil {
			if b, err = Open(filepath.Join(binDir, elfName)); err != nil {
				t.Fatal(err)
			}
			bins[elfName] = b
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		s, err := snapshot.Load(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", base, err)
		}
		var rets []uint64
		for a := s.Regs.X18 - 8; a >= s.SCSBase && a < s.Regs.X18; a -= 8 {
			v, _ := s.Memory.Load(a)
			rets = append(rets, v)
		}
		for fp, n := s.Regs.X29, 0; fp != 0 && n < 1000; n++ {
			next, ok1 := s.Memory.Load(fp)
			lr, ok2 := s.Memory.Load(fp + 8)
			if !ok1 || !ok2 {
				t.Fatalf("%s: frame record at %#x unreadable", base, fp)
			}
			rets = append(rets, lr)
			fp = next
		}
		tramps := 0
		for _, raw := range rets {
			ret := s.Layout.Strip(raw)
			cs, err := b.CallBefore(ret)
			if err != nil {
				t.Errorf("%s: %#x: %v", base, ret, err)
				continue
			}
			sym := s.Symbols.Func(ret)
			if sym == "sigreturn_tramp" {
				tramps++
				if cs.Call {
					t.Errorf("%s: trampoline %#x follows a call %q", base, ret, cs.Insn)
				}
				continue
			}
			if !cs.Call || cs.Func != sym || !strings.HasPrefix(cs.Insn, "bl ") {
				t.Errorf("%s: return address %#x (%s): %+v, want a bl in %s", base, ret, sym, cs, sym)
			}
			// The bl's target must be a function start.
			if g, ok := b.FuncAt(cs.Target); !ok || g.Addr != cs.Target {
				t.Errorf("%s: bl at %#x targets %#x, not a function start", base, ret-4, cs.Target)
			}
		}
		if want := map[bool]int{true: 2}[strings.Contains(base, "signal")]; tramps != want {
			t.Errorf("%s: %d trampoline addresses, want %d (SCS and frame record)", base, tramps, want)
		}
	}
}

func TestCallBeforeErrors(t *testing.T) {
	b, err := Open(binDir + "/clang-nopac.elf")
	if err != nil {
		t.Fatal(err)
	}
	start, _ := b.Func("_start")
	for _, ret := range []uint64{0, 2, start.Addr + 2, 0x1000, ^uint64(0) &^ 3} {
		if cs, err := b.CallBefore(ret); err == nil {
			t.Errorf("CallBefore(%#x) = %+v, want an error", ret, cs)
		}
	}
	// The first word of the text has nothing before it in the section.
	if _, err := b.CallBefore(b.text[0].addr); err == nil {
		t.Errorf("CallBefore(text start) succeeded")
	}
	if _, err := Open("prologue_test.go"); err == nil {
		t.Error("Open of a non-ELF file succeeded")
	}
}

func FuzzScanCode(f *testing.F) {
	f.Add(code(0xd503233f, insnSCSPush, 0xa9bf7bfd, 0x910003fd, 0x94000010, insnSCSPop, insnRETAA))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, c []byte) {
		fn := ScanCode("f", 0x1000, c)
		n := len(c) / 4
		if fn.Calls+fn.Unknown > n || fn.EntryNOPs > n || fn.Size != uint64(len(c)) {
			t.Fatalf("%+v for %d words", fn, n)
		}
		if fn.SignBeforePush && (!fn.SCSPush || fn.Sign == KeyNone) {
			t.Fatalf("SignBeforePush without sign and push: %+v", fn)
		}
	})
}

func BenchmarkScanCode(b *testing.B) {
	c := code(0xd503233f, insnSCSPush, 0xa9bf7bfd, 0x910003fd, 0x94000010, 0xa8c17bfd, insnSCSPop, 0xd50323bf, 0xd65f03c0)
	for b.Loop() {
		ScanCode("f", 0x1000, c)
	}
}

// TestOpenGCCPacretB reads the shapes of three functions of a GCC pac-ret
// (B key) binary.
func TestOpenGCCPacretB(t *testing.T) {
	b, err := Open("../../testdata/arm64/bin/gcc-pacretb.elf")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"capture":      "scs push true, sign B (before push true), frame record true, leaf false",
		"capture_leaf": "scs push false, sign - (before push false), frame record false, leaf true",
		"main":         "scs push false, sign B (before push false), frame record true, leaf false",
	}
	for name, w := range want {
		f, _ := b.Func(name)
		got := fmt.Sprintf("scs push %v, sign %v (before push %v), frame record %v, leaf %v",
			f.SCSPush, f.Sign, f.SignBeforePush, f.FrameRecord, f.Leaf())
		if f.Name != name || got != w {
			t.Errorf("%s (%s): %s, want %s", name, f.Name, got, w)
		}
	}
}
