// Package fuzzpatch makes fuzz targets over real files: the fuzzed input
// is a short list of edits applied to a shipped file, not the whole file.
// Inputs stay small (the engine's mutation and minimisation work on tens
// of bytes, not on a multi-KiB or multi-MiB file) and every input is the
// real file but for a few bytes, so parsing gets deep.
//
// A patch is a sequence of records:
//
//	offset  4 bytes, little-endian, taken modulo the file's length
//	n       1 byte
//	data    n bytes (fewer if the patch ends first), written at offset
//	        (clipped at the file's end)
//
// A record with n = 0 truncates the file at offset. At most MaxEdits
// records are applied; the rest of a longer patch is ignored.
package fuzzpatch

import (
	"bytes"
	"compress/gzip"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"strings"
)

// MaxEdits is the number of records Apply applies at most.
const MaxEdits = 64

// maxSeeds bounds the seeds of one file.
const maxSeeds = 48

// maxFile bounds what Read decompresses: the shipped files are a few MiB.
const maxFile = 64 << 20

// TB is the part of testing.TB Read uses.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Read returns the contents of the file path, gunzipped when the name ends
// in .gz; it fails t on any error.
func Read(t TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v", err)
		return nil
	}
	if !strings.HasSuffix(path, ".gz") {
		return b
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
		return nil
	}
	out, err := io.ReadAll(io.LimitReader(zr, maxFile+1))
	if err != nil || len(out) > maxFile {
		t.Fatalf("%s: gunzip: %v (%d bytes, limit %d)", path, err, len(out), maxFile)
		return nil
	}
	return out
}

// Apply returns a copy of base with the edits of patch applied; base is
// not changed. An empty base is returned as is.
func Apply(base, patch []byte) []byte {
	out := bytes.Clone(base)
	if len(out) == 0 {
		return out
	}
	for range MaxEdits {
		if len(patch) < 5 {
			break
		}
		off := int(binary.LittleEndian.Uint32(patch) % uint32(len(out)))
		n := int(patch[4])
		patch = patch[5:]
		if n == 0 {
			out = out[:off]
			if off == 0 {
				break
			}
			continue
		}
		n = min(n, len(patch))
		copy(out[off:], patch[:n])
		patch = patch[n:]
	}
	return out
}

// Edit encodes one record writing data at off (for seeds).
func Edit(off uint32, data []byte) []byte {
	if len(data) == 0 || len(data) > 255 {
		panic(fmt.Sprintf("fuzzpatch.Edit: %d bytes of data, want 1 to 255", len(data)))
	}
	r := binary.LittleEndian.AppendUint32(nil, off)
	r = append(r, byte(len(data)))
	return append(r, data...)
}

// Seeds returns at most n patches for seeding a target over base (n is
// kept small where an execution is slow: the engine runs every seed before
// it fuzzes, within the same -fuzztime): the empty patch
// (base itself) and, for an ELF file, patches that rewrite each program
// header, each PT_NOTE's first bytes, each section header and the start
// of each allocated section with their own bytes. They leave the file as
// it is but give the engine records at offsets where the structure is, to
// mutate from.
func Seeds(base []byte, n int) [][]byte {
	n = min(n, maxSeeds)
	seeds := [][]byte{{}}
	if n <= 1 {
		return seeds
	}
	f, err := elf.NewFile(bytes.NewReader(base))
	if err != nil {
		return seeds
	}
	same := func(off uint64, size int) {
		if len(seeds) >= n || off >= uint64(len(base)) || off > 1<<32-1 || size <= 0 {
			return
		}
		size = min(size, 255, len(base)-int(off))
		seeds = append(seeds, Edit(uint32(off), base[off:off+uint64(size)]))
	}
	phoff, shoff := uint64(0), uint64(0)
	phsize, shsize := 56, 64
	if f.Class == elf.ELFCLASS32 {
		phsize, shsize = 32, 40
	}
	if len(base) >= 64 && f.Class == elf.ELFCLASS64 {
		phoff = f.ByteOrder.Uint64(base[32:])
		shoff = f.ByteOrder.Uint64(base[40:])
	}
	same(0, 64) // the ELF header
	for i, p := range f.Progs {
		if phoff != 0 {
			same(phoff+uint64(i*phsize), phsize)
		}
		if p.Type == elf.PT_NOTE {
			same(p.Off, 64)
		}
	}
	for i, s := range f.Sections {
		if shoff != 0 && i < 64 {
			same(shoff+uint64(i*shsize), shsize)
		}
		if s.Type != elf.SHT_NOBITS && s.Size > 0 && i < 64 {
			same(s.Offset, 32)
		}
	}
	return seeds
}
