package vmcore

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// bounded runs f and fails t when it allocates more than 400 MB: the
// bound every hostile input is held to (an input of a few KiB that costs
// more is a bomb). Memory is what the machine's load does not move; the
// time is logged (a bomb of the kind these inputs were, hours of work, is
// go test's timeout). It returns what f returned.
func bounded[T any](t *testing.T, what string, f func() T) T {
	t.Helper()
	const alloc = 400 << 20
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	r := f()
	took := time.Since(start)
	runtime.ReadMemStats(&after)
	a := after.TotalAlloc - before.TotalAlloc
	t.Logf("%s: %v, %d bytes allocated", what, took, a)
	if a > alloc {
		t.Errorf("%s: %v and %d bytes allocated, limit %d", what, took, a, alloc)
	}
	return r
}

// selfBTF is a BTF whose struct task_struct has n anonymous members of
// type task_struct itself (no compiler writes it; a hostile dump can),
// one through a typedef, plus a member named "pid".
func selfBTF(n int) []byte {
	b := &btfBuilder{strs: []byte{0}}
	var ms [][]uint32
	for i := range n {
		typ := uint32(1)
		if i == 0 {
			typ = 2
		}
		ms = append(ms, b.member("", typ, uint32(64*i)))
	}
	ms = append(ms, b.member("pid", 3, 0))
	b.structType("task_struct", 4096, false, ms...) // 1
	b.typ("task_t", btfTypedef, false, 0, 1)        // 2
	b.typ("int", btfInt, false, 0, 4, 32)           // 3
	return b.bytes()
}

// TestBTFTypeLoop: a lookup through anonymous members that are the
// struct itself answers "no such member" at once (before: n^9 descents,
// 5 s for n = 8, hours for n = 16).
func TestBTFTypeLoop(t *testing.T) {
	btf, err := ParseBTF(selfBTF(16))
	if err != nil {
		t.Fatal(err)
	}
	err = bounded(t, "task_struct.thread_info through 16 self-members", func() error {
		_, err := btf.Offset("task_struct.thread_info")
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "no member thread_info") {
		t.Errorf("lookup through a loop: %v, want no member", err)
	}
	// What kernel.New asks: every key, each unknown, none hangs.
	offs := bounded(t, "Offsets over the loop", func() map[string]Offset { return (&Vmcore{}).Offsets(btf) })
	if o := offs["task_struct.stack"]; o.Source != "" {
		t.Errorf("task_struct.stack %+v, want unknown", o)
	}
	// Even a member beside the loop: the struct is not one a compiler
	// wrote, so nothing in it is trusted.
	if _, err := btf.Offset("task_struct.pid"); err == nil || !strings.Contains(err.Error(), "contains itself") {
		t.Errorf("task_struct.pid in a looping struct: %v", err)
	}
}

// dagBTF is a chain of 8 structs each with 16 anonymous members of the
// next (a DAG, no loop: 16^8 paths), the last holding "stack" after 16
// members of its own, and task_struct embedding the first.
func dagBTF() []byte {
	b := &btfBuilder{strs: []byte{0}}
	for i := range 8 { // types 1..8
		var ms [][]uint32
		for j := range 16 {
			if i == 7 {
				ms = append(ms, b.member(fmt.Sprintf("f%d", j), 10, uint32(64*j)))
			} else {
				ms = append(ms, b.member("", uint32(i+2), uint32(64*j)))
			}
		}
		if i == 7 {
			ms = append(ms, b.member("stack", 10, 64*16))
		}
		b.structType(fmt.Sprintf("s%d", i), 4096, false, ms...)
	}
	b.structType("task_struct", 4096, false, b.member("pid", 10, 0), b.member("", 1, 64)) // 9
	b.typ("long", btfInt, false, 0, 8, 64)                                                // 10
	return b.bytes()
}

// TestBTFEmbeddedDAG: a member found through types embedded many times
// over (16^8 paths) is found at once, at the first path's offset.
func TestBTFEmbeddedDAG(t *testing.T) {
	btf, err := ParseBTF(dagBTF())
	if err != nil {
		t.Fatal(err)
	}
	got := bounded(t, "task_struct.stack through 16^8 paths", func() pair[uint64] { return mk(btf.Offset("task_struct.stack")) })
	if o, err := got.get(); err != nil || o != 8+16*8 {
		t.Errorf("task_struct.stack: %d, %v; want %d", o, err, 8+16*8)
	}
	got = bounded(t, "task_struct.nope through 16^8 paths", func() pair[uint64] { return mk(btf.Offset("task_struct.nope")) })
	if _, err := got.get(); err == nil || !strings.Contains(err.Error(), "no member nope") {
		t.Errorf("task_struct.nope: %v", err)
	}
}

// sharedNameBTF is n structs (without members) all named by one string of
// nameLen bytes.
func sharedNameBTF(n, nameLen int) []byte {
	b := &btfBuilder{strs: []byte{0}}
	name := b.str(strings.Repeat("s", nameLen))
	for range n {
		b.typ("", btfStruct, false, 0, 8)
		le.PutUint32(b.types[len(b.types)-12:], name)
	}
	return b.bytes()
}

// TestBTFLongNames: structs sharing one long name cost linear time (before:
// each copied the name, 4 s for 256 KiB of BTF), and a name longer than
// KSYM_NAME_LEN is malformed BTF naming the type and its offset.
func TestBTFLongNames(t *testing.T) {
	bomb := sharedNameBTF(1<<16, 256<<10) // 1 MiB: 65,536 structs named by one 256 KiB string
	_, err := bounded(t, fmt.Sprintf("ParseBTF of %d bytes, 65,536 structs sharing a 256 KiB name", len(bomb)), func() pair[*BTF] {
		return mk(ParseBTF(bomb))
	}).get()
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "longer than 511 bytes (KSYM_NAME_LEN") {
		t.Errorf("name of 256 KiB: %v", err)
	}
	// A member's name outside the strings is malformed too.
	b := &btfBuilder{strs: []byte{0}}
	b.structType("task_struct", 8, false, []uint32{1 << 20, 0, 0})
	if _, err := ParseBTF(b.bytes()); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "type 1: member 0 name offset 1048576 outside") {
		t.Errorf("member name outside the strings: %v", err)
	}
	// Names of the largest legal length: accepted, and what parsing
	// allocates is a small multiple of the input.
	ok := sharedNameBTF(1<<16, 511)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	btf, err := ParseBTF(ok)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if a := after.TotalAlloc - before.TotalAlloc; a > 8*uint64(len(ok)) {
		t.Errorf("ParseBTF of %d bytes allocated %d", len(ok), a)
	}
	if n, err := btf.Size(strings.Repeat("s", 511)); err == nil || n != 0 {
		// Every struct is without members: none is complete.
		t.Errorf("Size: %d, %v", n, err)
	}
}

// pair carries a value and an error out of bounded.
type pair[T any] struct {
	v   T
	err error
}

func mk[T any](v T, err error) pair[T] { return pair[T]{v, err} }
func (p pair[T]) get() (T, error)      { return p.v, p.err }

// kallsymsBomb returns a synthetic vmcore whose kallsyms tables hold 2^20
// symbols named by one token of 1,024 bytes each: kallsyms_offsets (4 MiB)
// and kallsyms_names (2 MiB, "\x01\x00" repeated) are virtual ranges whose
// pages all alias one physical page, so the dump stays 6 MiB (8 KB
// gzipped) while the names would expand to 1 GiB.
func kallsymsBomb() []byte {
	s := newSynth(synthOpts{pageShift: 12, vaBits: 48})
	img := s.ram[imageOff:]
	le.PutUint32(img[0x90000:], 1<<20)
	tt := img[0x90400:]
	clear(tt[:0x800])
	for i := range 1024 {
		tt[i] = 'a'
	}
	for i := 1; i < 256; i++ {
		le.PutUint16(img[0x90100+2*i:], 1025) // the empty token after it
	}
	le.PutUint16(img[0x90100:], 0)
	zero, names := uint64(0xa0000), uint64(0xa1000) // image pages
	clear(img[zero : zero+0x1000])
	for i := range 0x800 {
		img[names+2*uint64(i)], img[names+2*uint64(i)+1] = 1, 0
	}
	offsVA, namesVA := s.kimage+0x2000_0000, s.kimage+0x2100_0000
	for off := uint64(0); off < 4<<20; off += 0x1000 {
		s.mapAt(offsVA+off, s.pa(imageOff+zero), 3, 0)
	}
	for off := uint64(0); off < 2<<20; off += 0x1000 {
		s.mapAt(namesVA+off, s.pa(imageOff+names), 3, 0)
	}
	s.info = strings.Replace(s.info, fmt.Sprintf("SYMBOL(kallsyms_offsets)=%x", s.kva(0x91000)), fmt.Sprintf("SYMBOL(kallsyms_offsets)=%x", offsVA), 1)
	s.info = strings.Replace(s.info, fmt.Sprintf("SYMBOL(kallsyms_names)=%x", s.kva(0x92000)), fmt.Sprintf("SYMBOL(kallsyms_names)=%x", namesVA), 1)
	return s.bytes()
}

// TestKallsymsBomb: names that expand far beyond the bytes of
// kallsyms_names read are rejected before they are built (before: 1.2 GB
// allocated and 20 s for this dump).
func TestKallsymsBomb(t *testing.T) {
	v, err := loadBytes(kallsymsBomb())
	if err != nil {
		t.Fatal(err)
	}
	err = bounded(t, "Kallsyms of 2^20 symbols of a 1,024-byte token", func() error {
		_, err := v.Kallsyms()
		return err
	})
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "kallsyms_names") || !strings.Contains(err.Error(), "synth.vmcore") {
		t.Errorf("kallsyms bomb: %v", err)
	}
}
