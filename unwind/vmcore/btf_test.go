package vmcore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// btfBuilder encodes BTF types.
type btfBuilder struct {
	types, strs []byte
}

func (b *btfBuilder) str(s string) uint32 {
	if s == "" {
		return 0
	}
	off := uint32(len(b.strs))
	b.strs = append(append(b.strs, s...), 0)
	return off
}

func (b *btfBuilder) typ(name string, kind int, kflag bool, vlen int, sizeTyp uint32, extra ...uint32) {
	info := uint32(kind)<<24 | uint32(vlen)
	if kflag {
		info |= 1 << 31
	}
	b.types = binary.LittleEndian.AppendUint32(b.types, b.str(name))
	b.types = binary.LittleEndian.AppendUint32(b.types, info)
	b.types = binary.LittleEndian.AppendUint32(b.types, sizeTyp)
	for _, e := range extra {
		b.types = binary.LittleEndian.AppendUint32(b.types, e)
	}
}

// member returns the three words of a member.
func (b *btfBuilder) member(name string, typ, bitOff uint32) []uint32 {
	return []uint32{b.str(name), typ, bitOff}
}

func (b *btfBuilder) structType(name string, size uint32, kflag bool, ms ...[]uint32) {
	var extra []uint32
	for _, m := range ms {
		extra = append(extra, m...)
	}
	b.typ(name, btfStruct, kflag, len(ms), size, extra...)
}

func (b *btfBuilder) bytes() []byte {
	le := binary.LittleEndian
	h := make([]byte, 24)
	le.PutUint16(h, 0xeb9f)
	h[2] = 1
	le.PutUint32(h[4:], 24)
	le.PutUint32(h[8:], 0)
	le.PutUint32(h[12:], uint32(len(b.types)))
	le.PutUint32(h[16:], uint32(len(b.types)))
	le.PutUint32(h[20:], uint32(len(b.strs)))
	return append(append(h, b.types...), b.strs...)
}

// kernelBTF describes the structures of a made-up kernel whose layout
// differs from the table's, so a test sees which source was used.
func kernelBTF() []byte {
	b := &btfBuilder{strs: []byte{0}}
	b.typ("unsigned long", btfInt, false, 0, 8, 64)                                         // 1
	b.typ("", btfArray, false, 0, 0, 1, 1, 31)                                              // 2
	b.structType("cpu_context", 104, false, b.member("x19", 1, 0), b.member("fp", 1, 80*8), // 3
		b.member("sp", 1, 88*8), b.member("pc", 1, 96*8))
	b.typ("cpu_context_t", btfTypedef, false, 0, 3)                                                // 4
	b.structType("thread_struct", 256, false, b.member("cpu_context", 4, 0))                       // 5
	b.structType("thread_info", 40, false, b.member("flags", 1, 0), b.member("scs_base", 1, 24*8), // 6
		b.member("scs_sp", 1, 32*8))
	b.typ("", btfPtr, false, 0, 1)                                               // 7
	b.structType("", 16, false, b.member("pad", 1, 0), b.member("stack", 7, 64)) // 8
	b.structType("task_struct", 4096, true, b.member("thread_info", 6, 0),       // 9
		b.member("", 8, 40*8), b.member("thread", 5, 2048*8), b.member("flags", 1, 3<<24|60*8))
	b.structType("pt_regs", 336, false, b.member("regs", 2, 0), b.member("sp", 1, 248*8), // 10
		b.member("pc", 1, 256*8), b.member("pstate", 1, 264*8), b.member("stackframe", 2, 304*8))
	b.typ("e", btfEnum, false, 2, 4, b.str("A"), 0, b.str("B"), 1) // 11
	b.typ("f", btfFuncProto, false, 1, 1, 0, 1)                    // 12
	return b.bytes()
}

func TestBTF(t *testing.T) {
	btf, err := ParseBTF(kernelBTF())
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]uint64{
		"task_struct.thread.cpu_context":    2048,
		"task_struct.thread.cpu_context.sp": 2048 + 88,
		"task_struct.stack":                 48,
		"thread_info.scs_sp":                32,
		"pt_regs.stackframe":                304,
	} {
		if got, err := btf.Offset(path); err != nil || got != want {
			t.Errorf("%s: %d, %v; want %d", path, got, err, want)
		}
	}
	if _, err := btf.Offset("task_struct.flags"); err == nil {
		t.Errorf("bitfield member: no error")
	}
	if _, err := btf.Offset("task_struct.nope"); err == nil {
		t.Errorf("missing member: no error")
	}
	if n, err := btf.Size("pt_regs"); err != nil || n != 336 {
		t.Errorf("sizeof(pt_regs) %d, %v", n, err)
	}
	good := kernelBTF()
	for _, cut := range []int{0, 10, 30, len(good) - 40} {
		if _, err := ParseBTF(good[:cut]); !errors.Is(err, ErrCorrupt) {
			t.Errorf("truncated to %d: %v", cut, err)
		}
	}
}

// TestOffsetsSources: offsets come from the dump's BTF when it has them,
// else from the 6.1/6.12 table, else are unknown; and the BTF is read from
// the dump between __start_BTF and __stop_BTF.
func TestOffsetsSources(t *testing.T) {
	s := newSynth(synthOpts{pageShift: 12, vaBits: 48})
	raw := kernelBTF()
	copy(s.ram[imageOff+0xa0000:], raw)
	v, err := loadBytes(s.bytes())
	if err != nil {
		t.Fatal(err)
	}
	syms := []KSym{{Name: "__start_BTF", Addr: s.kva(0xa0000)}, {Name: "__stop_BTF", Addr: s.kva(0xa0000) + uint64(len(raw))}}
	btf, err := v.BTF(syms)
	if err != nil {
		t.Fatal(err)
	}
	offs := v.Offsets(btf)
	if o := offs["thread_info.scs_sp"]; o.Value != 32 || o.Source != "btf" {
		t.Errorf("scs_sp %+v", o)
	}
	if o := offs["task_struct.thread.cpu_context"]; o.Value != 2048 || o.Source != "btf" {
		t.Errorf("task_struct.thread.cpu_context %+v", o)
	}
	if o := offs["cpu_context.pc"]; o.Value != 96 || o.Source != "btf" {
		t.Errorf("cpu_context.pc %+v", o)
	}
	noBTF := v.Offsets(nil)
	if o := noBTF["pt_regs.stackframe"]; o.Value != 304 || o.Source != "table 6.1" {
		t.Errorf("table stackframe %+v", o)
	}
	if o := noBTF["thread_info.scs_sp"]; o.Source != "" {
		t.Errorf("scs_sp without BTF: %+v, want unknown", o)
	}
	if _, err := v.BTF(nil); err == nil {
		t.Errorf("BTF without symbols: no error")
	}
}

func FuzzBTF(f *testing.F) {
	f.Add(kernelBTF())
	f.Fuzz(func(t *testing.T, b []byte) {
		btf, err := ParseBTF(b)
		if err != nil {
			return
		}
		for _, k := range OffsetKeys {
			btf.Offset(k)
		}
		btf.Size("pt_regs")
	})
}

// TestPerCPU reads __per_cpu_offset from the dump and a per-CPU variable
// through it.
func TestPerCPU(t *testing.T) {
	s := newSynth(synthOpts{pageShift: 12, vaBits: 48})
	// __per_cpu_offset at image+0x70000; CPU c's area at image+0x78000+c*0x1000
	// relative to the variable's link address image+0x71000.
	for c := uint64(0); c < 2; c++ {
		s.put64(s.pa(imageOff+0x70000+8*c), 0x7000+c*0x1000)
		s.put64(s.pa(imageOff+0x71000+0x7000+c*0x1000), 0xc0de0+c)
	}
	v, err := loadBytes(s.bytes())
	if err != nil {
		t.Fatal(err)
	}
	syms := []KSym{{Name: "__per_cpu_offset", Addr: s.kva(0x70000)}, {Name: "irq_stack_ptr", Addr: s.kva(0x71000)}}
	offs, err := v.PerCPUOffsets(syms, 2)
	if err != nil {
		t.Fatal(err)
	}
	for c, off := range offs {
		if w, err := v.ReadVirt64(syms[1].Addr + off); err != nil || w != 0xc0de0+uint64(c) {
			t.Errorf("cpu%d: %#x, %v", c, w, err)
		}
	}
	if _, err := v.PerCPUOffsets(nil, 2); err == nil {
		t.Errorf("no symbol: no error")
	}
	if _, err := v.PerCPUOffsets(syms, 1<<20); err == nil {
		t.Errorf("a million CPUs: no error")
	}
}

func FuzzParseKallsyms(f *testing.F) {
	f.Add("ffff800008000000 T _text\nffff800008010000 t el1h_64_irq [mod]\n")
	f.Fuzz(func(t *testing.T, s string) {
		syms, err := ParseKallsyms(strings.NewReader(s))
		if err != nil {
			return
		}
		for i := 1; i < len(syms); i++ {
			if syms[i].Addr < syms[i-1].Addr {
				t.Fatalf("not sorted: %+v", syms)
			}
		}
	})
}

// TestBTFErrors: the BTF read from a dump names the dump, __start_BTF's
// address and where in the BTF it is malformed; a size the dump cannot
// hold is refused before anything is allocated.
func TestBTFErrors(t *testing.T) {
	s := newSynth(synthOpts{pageShift: 12, vaBits: 48})
	raw := kernelBTF()
	raw[2] = 9 // version
	copy(s.ram[imageOff+0xa0000:], raw)
	v, err := loadBytes(s.bytes())
	if err != nil {
		t.Fatal(err)
	}
	start := s.kva(0xa0000)
	syms := []KSym{{Name: "__start_BTF", Addr: start}, {Name: "__stop_BTF", Addr: start + uint64(len(raw))}}
	_, err = v.BTF(syms)
	want := fmt.Sprintf("synth.vmcore: BTF at __start_BTF %#x (%d bytes), its byte 0x2 at %#x", start, len(raw), start+2)
	if !errors.Is(err, ErrCorrupt) || err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("bad version: %v\nwant it to say %q", err, want)
	}
	syms[1].Addr = start + 1<<30
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err = v.BTF(syms)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "synth.vmcore") || !strings.Contains(err.Error(), fmt.Sprintf("__start_BTF %#x", start)) {
		t.Errorf("1 GiB of BTF: %v", err)
	}
	if a := after.TotalAlloc - before.TotalAlloc; a > 1<<20 {
		t.Errorf("1 GiB of BTF: %d bytes allocated before refusing it", a)
	}
	// Past the mapped image: the read error names the dump and the address.
	syms[0].Addr, syms[1].Addr = s.kva(0xff000), s.kva(0x101000)
	if _, err := v.BTF(syms); err == nil || !strings.Contains(err.Error(), "synth.vmcore") || !strings.Contains(err.Error(), fmt.Sprintf("__start_BTF %#x", s.kva(0xff000))) {
		t.Errorf("unmapped BTF: %v", err)
	}
}
