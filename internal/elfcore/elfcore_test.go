package elfcore

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/unwindkit/unwindkit/internal/errs"
)

func TestNormalize(t *testing.T) {
	got := Normalize([]Range{{10, 20}, {0, 5}, {15, 30}, {5, 5}, {30, 40}, {50, 60}})
	want := []Range{{0, 5}, {10, 40}, {50, 60}}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// TestTrimEdges: a kept range that covers bytes beyond p_filesz keeps
// only the bytes the file had; physical and virtual address spaces.
func TestTrimEdges(t *testing.T) {
	bd := &Builder{
		Notes: []BNote{{Name: "CORE", Type: 1, Desc: []byte("abcd")}},
		Loads: []BLoad{{VAddr: 0x1000, PAddr: 0x9000, Data: bytes.Repeat([]byte{7}, 0x100), MemSz: 0x2000}},
	}
	b := bd.Bytes()
	for _, phys := range []bool{false, true} {
		f, err := Parse("t", bytes.NewReader(b), int64(len(b)), phys)
		if err != nil {
			t.Fatal(err)
		}
		base := uint64(0x1000)
		if phys {
			base = 0x9000
		}
		var out bytes.Buffer
		if err := WriteTrimmed(&out, f, []Range{{base + 0x80, base + 0x1800}}); err != nil {
			t.Fatal(err)
		}
		g, err := Parse("t2", bytes.NewReader(out.Bytes()), int64(out.Len()), phys)
		if err != nil {
			t.Fatal(err)
		}
		if len(g.Notes) != 1 || string(g.Notes[0].Desc) != "abcd" {
			t.Errorf("notes %+v", g.Notes)
		}
		var w [8]byte
		if err := g.ReadAt(w[:], base+0xf8); err != nil || w[0] != 7 {
			t.Errorf("kept byte: %v %v", w, err)
		}
		if err := g.ReadAt(w[:1], base+0x10); !errors.Is(err, ErrNotHeld) {
			t.Errorf("dropped byte: %v", err)
		}
		if err := g.ReadAt(w[:1], base+0x100); !errors.Is(err, ErrNotHeld) {
			t.Errorf("byte beyond p_filesz: %v", err)
		}
		var total uint64
		for _, p := range g.Loads {
			total += p.MemSz
		}
		if total != 0x2000 {
			t.Errorf("segments cover %#x bytes, want the original 0x2000", total)
		}
	}
}

func TestNotePadding(t *testing.T) {
	b := (&Builder{Notes: []BNote{{Name: "CORE", Type: 1, Desc: []byte{1}}}}).Bytes()
	// Trailing zero padding shorter than a note header is tolerated...
	pad := append(bytes.Clone(b), 0, 0, 0, 0)
	fixNoteSize(pad, 4)
	if _, err := Parse("p", bytes.NewReader(pad), int64(len(pad)), false); err != nil {
		t.Errorf("zero padding: %v", err)
	}
	// ... non-zero garbage is not.
	bad := append(bytes.Clone(b), 1, 0, 0, 0)
	fixNoteSize(bad, 4)
	_, err := Parse("p", bytes.NewReader(bad), int64(len(bad)), false)
	if !errors.Is(err, errs.ErrCorrupt) || !strings.Contains(err.Error(), "note 1") {
		t.Errorf("garbage after notes: %v", err)
	}
}

// fixNoteSize grows the PT_NOTE's p_filesz (the first program header) by n.
func fixNoteSize(b []byte, n uint64) {
	off := 64 + 32
	v := uint64(0)
	for i := 7; i >= 0; i-- {
		v = v<<8 | uint64(b[off+i])
	}
	v += n
	for i := range 8 {
		b[off+i] = byte(v >> (8 * i))
	}
}

// TestTrimEmptyNote: a core whose PT_NOTE is empty loads, and so does
// every trimmed copy, though the empty segment then sits at the very end
// of the file (a read of 0 bytes there is io.EOF for a bytes.Reader: the
// FuzzLoad targets found it).
func TestTrimEmptyNote(t *testing.T) {
	bd := &Builder{Loads: []BLoad{{VAddr: 0x1000, PAddr: 0x9000, Data: bytes.Repeat([]byte{7}, 0x100)}}}
	b := bd.Bytes()
	for _, keep := range [][]Range{nil, {{0x1000, 0x1100}}, {{0x1000, 0x1010}}} {
		f, err := Parse("t", bytes.NewReader(b), int64(len(b)), false)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if err := WriteTrimmed(&out, f, keep); err != nil {
			t.Fatal(err)
		}
		g, err := Parse("t2", bytes.NewReader(out.Bytes()), int64(out.Len()), false)
		if err != nil {
			t.Fatalf("keep %v: the trimmed copy does not load: %v", keep, err)
		}
		if len(g.Notes) != 0 {
			t.Errorf("keep %v: notes %+v", keep, g.Notes)
		}
		var w [1]byte
		if err := g.ReadAt(w[:], 0x1000); (err == nil) != (keep != nil) || (err == nil && w[0] != 7) {
			t.Errorf("keep %v: byte %v, %v", keep, w, err)
		}
	}
}

// TestTrimManySegments: trimming costs about (segments + ranges) log
// ranges, not their product: 65,000 PT_LOADs of one page not in the file
// and 260,000 kept ranges, four in each (before: 1.7*10^10 range checks,
// minutes). The bound is on the ranges the trimming looks at, counted,
// not on the time it takes.
func TestTrimManySegments(t *testing.T) {
	const n, per = 65000, 4
	bd := &Builder{}
	var keep []Range
	for i := range n {
		a := uint64(i) << 13 // a page, then a hole
		bd.Loads = append(bd.Loads, BLoad{VAddr: a, MemSz: 4096})
		for j := range uint64(per) {
			keep = append(keep, Range{a + 16*j, a + 16*j + 1})
		}
	}
	bd.Loads[n-1].Data = []byte{7}
	b := bd.Bytes()
	f, err := Parse("t", bytes.NewReader(b), int64(len(b)), false)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var out bytes.Buffer
	err = WriteTrimmed(&out, f, keep)
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	// Each range is looked at once, and each segment stops at one range
	// past its end: at most ranges + segments visits (the old loop: their
	// product).
	visits := trimVisits.Load()
	t.Logf("%d segments, %d ranges: %d range visits, %v", n, len(keep), visits, took)
	if visits > uint64(len(keep)+n) {
		t.Errorf("trimming %d segments to %d ranges looked at %d ranges", n, len(keep), visits)
	}
	g, err := Parse("t2", bytes.NewReader(out.Bytes()), int64(out.Len()), false)
	if err != nil {
		t.Fatal(err)
	}
	var w [1]byte
	if err := g.ReadAt(w[:], uint64(n-1)<<13); err != nil || w[0] != 7 {
		t.Errorf("the kept byte %v, %v", w, err)
	}
}
