package vmcore

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/unwindkit/unwindkit/internal/elfcore"
	"github.com/unwindkit/unwindkit/internal/pgtable"
)

var le = binary.LittleEndian

// synthOpts describes a synthetic vmcore: a kernel image, its page tables,
// a vmalloc'd stack, the linear map and the kallsyms tables.
type synthOpts struct {
	pageShift        uint
	vaBits, vaActual uint // NUMBER(VA_BITS), 64 - TCR_EL1_T1SZ
	lpa2, lpa        bool // descriptor format the tables use
	ramBase          uint64
	release          string
}

const (
	ramSize   = 6 << 20
	imageOff  = 0x200000 // the image's offset in RAM
	pgdOff    = 0x80000  // swapper_pg_dir's offset in the image
	tablesOff = 0x400000 // where other tables are allocated
	stackOff  = 0x580000 // the vmalloc'd stack's pages
	stackSize = 0x10000
)

// synthKsyms are the symbols the synthetic kallsyms tables hold (offsets
// from the image start).
var synthKsyms = []KSym{
	{Name: "_text", Type: 'T', Addr: 0},
	{Name: "do_sys_open", Type: 'T', Addr: 0x100},
	{Name: "handle_irq", Type: 't', Addr: 0x200},
	{Name: "gic_handle_irq", Type: 'T', Addr: 0x240},
	{Name: strings.Repeat("long", 50), Type: 't', Addr: 0x300}, // 201 tokens: a two-byte length
	{Name: "jiffies", Type: 'D', Addr: 0x60000},
}

type synth struct {
	o                      synthOpts
	f                      pgtable.Format
	ram                    []byte
	next                   uint64 // next free table (RAM offset)
	kimage, kvoff, pageOff uint64
	stackVA, root          uint64
	info                   string
	linearBlockLevel       int
}

func (s *synth) kva(off uint64) uint64   { return s.kimage + off }
func (s *synth) pa(ramOff uint64) uint64 { return s.o.ramBase + ramOff }

func (s *synth) put64(pa, v uint64)     { le.PutUint64(s.ram[pa-s.o.ramBase:], v) }
func (s *synth) get64(pa uint64) uint64 { return le.Uint64(s.ram[pa-s.o.ramBase:]) }

// Read, Write and NewTable make a synth the pgtable.Memory its tables are
// built in: RAM, with table pages taken from tablesOff up.
func (s *synth) Read(pa uint64) (uint64, error) { return s.get64(pa), nil }
func (s *synth) Write(pa, v uint64) error       { s.put64(pa, v); return nil }
func (s *synth) NewTable() (uint64, error) {
	t := s.pa(s.next)
	s.next += 1 << s.f.PageShift
	return t, nil
}

// mapAt maps va to pa with a leaf at level leaf, accessed (AF) and, where
// the descriptor has the field, inner shareable as PROT_DEFAULT has.
func (s *synth) mapAt(va, pa uint64, leaf int, extra uint64) {
	attrs := 1<<10 | extra
	if !s.f.LPA2 {
		attrs |= 3 << 8
	}
	if err := pgtable.Map(s.f, s.root, va, pa, leaf, attrs, s); err != nil {
		panic(err)
	}
}

func newSynth(o synthOpts) *synth {
	if o.ramBase == 0 {
		o.ramBase = 0x4000_0000
	}
	if o.vaActual == 0 {
		o.vaActual = o.vaBits
	}
	if o.release == "" {
		o.release = "6.1.0-test"
	}
	s := &synth{o: o, ram: make([]byte, ramSize), next: tablesOff}
	s.f = pgtable.Format{PageShift: o.pageShift, VABits: o.vaActual, LPA2: o.lpa2, LPA: o.lpa}
	s.kimage = -(uint64(1) << (min(o.vaActual, 48) - 1)) + 0x0800_0000
	s.kvoff = s.kimage - s.pa(imageOff)
	s.pageOff = -(uint64(1) << o.vaBits)
	s.root = s.pa(imageOff + pgdOff)
	ps := uint64(1) << o.pageShift
	// The image, page by page, with the contiguous hint.
	for off := uint64(0); off < 0x100000; off += ps {
		s.mapAt(s.kva(off), s.pa(imageOff+off), 3, 1<<52)
	}
	// A vmalloc'd stack.
	s.stackVA = s.kimage + 0x1000_0000
	for off := uint64(0); off < stackSize; off += ps {
		s.mapAt(s.stackVA+off, s.pa(stackOff+off), 3, 0)
	}
	// The linear map: a level-2 block at PAGE_OFFSET.
	s.linearBlockLevel = 2
	s.mapAt(s.pageOff, s.o.ramBase, 2, 0)
	// The kallsyms tables.
	s.kallsyms()
	var t1 = 64 - o.vaActual
	s.info = fmt.Sprintf("OSRELEASE=%s\nPAGESIZE=%d\nSYMBOL(swapper_pg_dir)=%x\nNUMBER(VA_BITS)=%d\n"+
		"NUMBER(kimage_voffset)=0x%x\nNUMBER(PHYS_OFFSET)=0x%x\nNUMBER(TCR_EL1_T1SZ)=0x%x\nKERNELOFFSET=0\n"+
		"NUMBER(KERNELPACMASK)=0x%x\n", o.release, ps, s.kva(pgdOff), o.vaBits, s.kvoff, o.ramBase, t1,
		-(uint64(1) << o.vaActual))
	for _, k := range []struct {
		n   string
		off uint64
	}{{"kallsyms_num_syms", 0x90000}, {"kallsyms_relative_base", 0x90008}, {"kallsyms_token_index", 0x90100},
		{"kallsyms_token_table", 0x90400}, {"kallsyms_offsets", 0x91000}, {"kallsyms_names", 0x92000}} {
		s.info += fmt.Sprintf("SYMBOL(%s)=%x\n", k.n, s.kva(k.off))
	}
	// The stack holds a recognisable word at its top.
	s.put64(s.pa(stackOff+stackSize-16), 0x5ca1ab1e)
	return s
}

var synthTokens = map[byte]string{1: "do_", 2: "sys_", 3: "_irq", 4: "long"}

func (s *synth) kallsyms() {
	img := s.ram[imageOff:]
	le.PutUint32(img[0x90000:], uint32(len(synthKsyms)))
	le.PutUint64(img[0x90008:], s.kimage)
	tt := img[0x90400:]
	o := 0
	for i := range 256 {
		le.PutUint16(img[0x90100+2*i:], uint16(o))
		tok := synthTokens[byte(i)]
		if tok == "" && i >= 0x20 && i < 0x7f {
			tok = string(rune(i))
		}
		o += copy(tt[o:], tok)
		tt[o] = 0
		o++
	}
	names := img[0x92000:]
	n := 0
	for i, k := range synthKsyms {
		le.PutUint32(img[0x91000+4*i:], uint32(k.Addr))
		full := string(k.Type) + k.Name
		var enc []byte
		for len(full) > 0 {
			found := false
			for t, tok := range synthTokens {
				if strings.HasPrefix(full, tok) {
					enc, full, found = append(enc, t), full[len(tok):], true
					break
				}
			}
			if !found {
				enc, full = append(enc, full[0]), full[1:]
			}
		}
		if len(enc) > 127 {
			names[n], names[n+1] = byte(len(enc)&0x7f|0x80), byte(len(enc)>>7)
			n += 2
		} else {
			names[n] = byte(len(enc))
			n++
		}
		n += copy(names[n:], enc)
	}
}

func prstatus(pid int, sp, x29, pc uint64) []byte {
	d := make([]byte, 392)
	le.PutUint32(d[32:], uint32(pid))
	le.PutUint64(d[112+29*8:], x29)
	le.PutUint64(d[112+31*8:], sp)
	le.PutUint64(d[112+32*8:], pc)
	return d
}

func (s *synth) builder() *elfcore.Builder {
	return &elfcore.Builder{
		Notes: []elfcore.BNote{
			{Name: "CORE", Type: 1, Desc: prstatus(1, s.stackVA+stackSize-0x100, s.stackVA+stackSize-0x80, s.kva(0x104))},
			{Name: "CORE", Type: 1, Desc: prstatus(2, s.stackVA+0x100, s.stackVA+0x180, s.kva(0x244))},
			{Name: "VMCOREINFO", Type: 0, Desc: []byte(s.info)},
		},
		Loads: []elfcore.BLoad{{PAddr: s.o.ramBase, VAddr: s.pageOff, Flags: 7, Data: s.ram}},
	}
}

func (s *synth) bytes() []byte { return s.builder().Bytes() }

func loadBytes(b []byte) (*Vmcore, error) {
	return Load("synth.vmcore", bytes.NewReader(b), int64(len(b)))
}

func elfcoreLoad(pa, n uint64) elfcore.BLoad {
	return elfcore.BLoad{PAddr: pa, Data: make([]byte, n)}
}
