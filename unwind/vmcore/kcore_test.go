package vmcore

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/unwindkit/unwindkit/internal/elfcore"
)

// kcoreOf lays the synthetic kernel out as /proc/kcore does
// (fs/proc/kcore.c): PT_LOADs by kernel virtual address, the linear map
// with its physical address, the image (KCORE_TEXT, p_paddr
// __pa_symbol: it overlaps the linear map physically) and vmalloc ranges
// with p_paddr -1; one zeroed NT_PRSTATUS, an NT_PRPSINFO, an
// NT_TASKSTRUCT and the VMCOREINFO note.
func (s *synth) kcoreOf(task []byte) []byte {
	none := ^uint64(0)
	b := &elfcore.Builder{
		Notes: []elfcore.BNote{
			{Name: "CORE", Type: 1, Desc: make([]byte, 392)},
			{Name: "CORE", Type: 3, Desc: make([]byte, 136)},
			{Name: "CORE", Type: ntTaskStruct, Desc: task},
			{Name: "VMCOREINFO", Type: 0, Desc: []byte(s.info)},
		},
		Loads: []elfcore.BLoad{
			{VAddr: s.pageOff, PAddr: s.o.ramBase, Flags: 7, Data: s.ram},
			{VAddr: s.kimage, PAddr: s.pa(imageOff), Flags: 7, Data: s.ram[imageOff : imageOff+0x100000]},
			{VAddr: s.stackVA, PAddr: none, Flags: 7, Data: s.ram[stackOff : stackOff+stackSize]},
			{VAddr: s.stackVA + 0x100000, PAddr: none, Flags: 7, MemSz: 0x10000},
		},
	}
	return b.Bytes()
}

// mutable is a file whose bytes the test changes while it is read.
type mutable struct {
	mu sync.Mutex
	b  []byte
}

func (m *mutable) ReadAt(p []byte, off int64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if off >= int64(len(m.b)) {
		return 0, errors.New("EOF")
	}
	return copy(p, m.b[off:]), nil
}

// TestKcoreFormat checks that a file laid out as /proc/kcore is read by
// virtual address: it is Virtual, has no CPUs, keeps its NT_TASKSTRUCT,
// reads the vmalloc'd stack at its address and physical memory through
// the linear map, and decodes the kallsyms tables from the image range.
func TestKcoreFormat(t *testing.T) {
	s := newSynth(synthOpts{pageShift: 12, vaBits: 48})
	task := []byte("task_struct copy")
	b := s.kcoreOf(task)
	v, err := loadBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	if !v.Virtual || v.Live || len(v.CPUs) != 0 || !bytes.Equal(v.TaskStruct, task) {
		t.Fatalf("virtual %v live %v cpus %d task %q", v.Virtual, v.Live, len(v.CPUs), v.TaskStruct)
	}
	w, err := v.ReadVirt64(s.stackVA + stackSize - 16)
	if err != nil || w != 0x5ca1ab1e {
		t.Errorf("stack word %#x, %v", w, err)
	}
	p, err := v.ReadPhys64(s.pa(stackOff + stackSize - 16))
	if err != nil || p != 0x5ca1ab1e {
		t.Errorf("physical word %#x, %v", p, err)
	}
	// The same kernel as a physical vmcore decodes the same symbols.
	pv, err := loadBytes(s.bytes())
	if err != nil {
		t.Fatal(err)
	}
	want, err := pv.Kallsyms()
	if err != nil {
		t.Fatal(err)
	}
	got, err := v.Kallsyms()
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("kallsyms %v (%v), want %v", got, err, want)
	}
	// A vmalloc range the file holds no bytes of is not held.
	if err := v.ReadVirt(make([]byte, 8), s.stackVA+0x100000); err == nil {
		t.Errorf("read of a range without bytes succeeded")
	}
	// Registers in the NT_PRSTATUS of a kcore-format file are refused.
	bad := bytes.Replace(b, make([]byte, 392), append(make([]byte, 391), 1), 1)
	if _, err := loadBytes(bad); err == nil || !strings.Contains(err.Error(), "NT_PRSTATUS") {
		t.Errorf("non-zero NT_PRSTATUS: %v", err)
	}
}

// TestKcoreKeepReads checks that with KeepReads every read still sees
// the file as it is (a live kernel), and that WriteTrimmed writes each
// byte as last read and the rest of its block as first read, as a
// kcore-format file that loads and reads back the same.
func TestKcoreKeepReads(t *testing.T) {
	s := newSynth(synthOpts{pageShift: 12, vaBits: 48})
	m := &mutable{b: s.kcoreOf([]byte("task"))}
	v, err := Load("kcore", m, int64(len(m.b)))
	if err != nil {
		t.Fatal(err)
	}
	at := s.stackVA + stackSize - 16
	off := bytes.LastIndex(m.b, le.AppendUint64(nil, 0x5ca1ab1e)) // the vmalloc range's copy
	if off < 0 {
		t.Fatal("stack word not in the file")
	}
	set := func(o int, x uint64) {
		m.mu.Lock()
		le.PutUint64(m.b[off+o:], x)
		m.mu.Unlock()
	}
	v.KeepReads(true)
	v.RecordReads(true)
	set(0, 1)
	if w, _ := v.ReadVirt64(at); w != 1 {
		t.Fatalf("read %#x, want the file's 1", w)
	}
	set(0, 2)
	set(8, 3) // the same block, not read again
	if w, _ := v.ReadVirt64(at); w != 2 {
		t.Errorf("read after a change %#x, want the file's 2", w)
	}
	var out bytes.Buffer
	if err := v.WriteTrimmed(&out, v.PagesToRanges(v.PagesRead())); err != nil {
		t.Fatal(err)
	}
	v.KeepReads(false)
	tv, err := loadBytes(out.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if !tv.Virtual || !bytes.Equal(tv.TaskStruct, []byte("task")) {
		t.Errorf("trimmed: virtual %v, task %q", tv.Virtual, tv.TaskStruct)
	}
	if w, err := tv.ReadVirt64(at); err != nil || w != 2 {
		t.Errorf("trimmed word %#x, %v; want the last read's 2", w, err)
	}
	if w, err := tv.ReadVirt64(at + 8); err != nil || w != 0 {
		t.Errorf("trimmed neighbour %#x, %v; want the block's first read, 0", w, err)
	}
	if err := tv.ReadVirt(make([]byte, 8), s.stackVA); err == nil {
		t.Errorf("trimmed file holds a page never read")
	}
	if out.Len() > 64<<10 {
		t.Errorf("trimmed file of %d bytes for one page", out.Len())
	}
}
