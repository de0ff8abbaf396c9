package elfcore

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
)

// sharedCore is a core whose second PT_LOAD lies inside the first, both
// mapping their addresses to the same file offsets, as /proc/kcore's
// KCORE_TEXT lies inside KCORE_VMALLOC on arm64; delta moves the inner
// one's p_offset (0: the same bytes).
func sharedCore(t *testing.T, delta int64) []byte {
	t.Helper()
	outer := make([]byte, 0x3000)
	for i := range outer {
		outer[i] = byte(i / 0x1000) // page n holds n
	}
	b := (&Builder{Loads: []BLoad{{VAddr: 0x10000, Data: outer}, {VAddr: 0x11000, Data: make([]byte, 0x1000)}}}).Bytes()
	// Point the inner segment's p_offset at the outer's bytes for its
	// addresses (program header 2: after the note's).
	ph := b[ehdrSize+2*phdrSize:]
	outerOff := binary.LittleEndian.Uint64(b[ehdrSize+phdrSize+8:])
	binary.LittleEndian.PutUint64(ph[8:], uint64(int64(outerOff)+0x1000+delta))
	return b
}

// TestParseShared checks that overlapping PT_LOADs mapping the same file
// bytes are merged into one segment (and refused by Parse), that ones
// mapping other bytes are refused, and that a trimmed copy of the merged
// file reads the same.
func TestParseShared(t *testing.T) {
	b := sharedCore(t, 0)
	if _, err := Parse("kcore", bytes.NewReader(b), int64(len(b)), false); err == nil || !strings.Contains(err.Error(), "overlaps") {
		t.Errorf("Parse of overlapping segments: %v", err)
	}
	f, err := ParseShared("kcore", bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Loads) != 1 || f.Loads[0].VAddr != 0x10000 || f.Loads[0].MemSz != 0x3000 {
		t.Fatalf("merged loads %+v", f.Loads)
	}
	var x [1]byte
	if err := f.ReadAt(x[:], 0x11800); err != nil || x[0] != 1 {
		t.Errorf("read in the overlap: %d, %v", x[0], err)
	}
	var out bytes.Buffer
	if err := WriteTrimmed(&out, f, []Range{{0x11000, 0x12000}}); err != nil {
		t.Fatal(err)
	}
	g, err := ParseShared("trimmed", bytes.NewReader(out.Bytes()), int64(out.Len()))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.ReadAt(x[:], 0x11800); err != nil || x[0] != 1 {
		t.Errorf("trimmed read: %d, %v", x[0], err)
	}
	if err := g.ReadAt(x[:], 0x10800); err == nil {
		t.Errorf("trimmed file holds a page not kept")
	}
	bad := sharedCore(t, 0x1000)
	if _, err := ParseShared("bad", bytes.NewReader(bad), int64(len(bad))); err == nil || !strings.Contains(err.Error(), "mapping other file bytes") {
		t.Errorf("overlap with other bytes: %v", err)
	}
}
