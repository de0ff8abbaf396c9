package vmcore

import (
	"fmt"
	"io"
	"sync"

	"github.com/unwindkit/unwindkit/internal/elfcore"
)

// ntTaskStruct is NT_TASKSTRUCT (include/uapi/linux/elf.h): /proc/kcore's
// copy of the reading task's task_struct, a note no other dump writes.
const ntTaskStruct = 4

// hasTaskStruct reports whether f has a CORE NT_TASKSTRUCT note.
func hasTaskStruct(f *elfcore.File) bool {
	if f == nil {
		return false
	}
	for i := range f.Notes {
		if f.Notes[i].Name == "CORE" && f.Notes[i].Type == ntTaskStruct {
			return true
		}
	}
	return false
}

// maxKept bounds the bytes KeepReads keeps (64 Ki blocks of 4 KiB).
const maxKept = 256 << 20

// keptBlock is the unit in which KeepReads keeps the file.
const keptBlock = 4096

// keepingReader reads through to the file it wraps and keeps, per 4 KiB
// block, a copy: the whole block as first read, each byte read since as
// last read.
type keepingReader struct {
	r      io.ReaderAt
	mu     sync.Mutex
	blocks map[int64][]byte
	bytes  int
}

// ReadAt reads b from the file and keeps it.
func (z *keepingReader) ReadAt(b []byte, off int64) (int, error) {
	n, err := z.r.ReadAt(b, off)
	z.mu.Lock()
	defer z.mu.Unlock()
	for i := 0; i < n; {
		at := off + int64(i)
		blk := at - at%keptBlock
		d, ok := z.blocks[blk]
		if !ok {
			if z.bytes+keptBlock > maxKept {
				return i, fmt.Errorf("vmcore: kept reads exceed %d bytes", maxKept)
			}
			d = make([]byte, keptBlock)
			m, _ := z.r.ReadAt(d, blk) // the rest of the block, as first read
			d = d[:m]
			z.blocks[blk] = d
			z.bytes += keptBlock
		}
		j := int(at - blk)
		if j >= len(d) {
			break
		}
		i += copy(d[j:], b[i:n])
	}
	return n, err
}

// keptAt serves the kept copy (what WriteTrimmed writes): the blocks
// read, and the file for the others.
type keptAt struct{ z *keepingReader }

func (k keptAt) ReadAt(b []byte, off int64) (int, error) {
	k.z.mu.Lock()
	defer k.z.mu.Unlock()
	n := 0
	for n < len(b) {
		at := off + int64(n)
		blk := at - at%keptBlock
		d, ok := k.z.blocks[blk]
		if !ok {
			m, err := k.z.r.ReadAt(b[n:min(len(b), n+keptBlock-int(at-blk))], at)
			n += m
			if err != nil {
				return n, err
			}
			continue
		}
		j := int(at - blk)
		if j >= len(d) {
			return n, io.EOF
		}
		n += copy(b[n:], d[j:])
	}
	return n, nil
}

// KeepReads starts (on) or ends (off) keeping what is read: reads still
// go to the file (a live dump, [Vmcore.Live], is read at each call's
// moment), and a copy of each 4 KiB block touched is kept, the block as
// first read and every byte read since as last read. [Vmcore.WriteTrimmed]
// writes the kept copy while it is on: a snapshot of what the reads saw.
// At most 256 MiB are kept; ending drops them. KeepReads is not safe to
// call concurrently with reads.
func (v *Vmcore) KeepReads(on bool) {
	switch {
	case on && v.kept == nil:
		v.kept = &keepingReader{r: v.f.R, blocks: map[int64][]byte{}}
		v.f.R = v.kept
	case !on && v.kept != nil:
		v.f.R = v.kept.r
		v.kept = nil
	}
}
