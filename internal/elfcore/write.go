package elfcore

import (
	"encoding/binary"
	"fmt"
	"io"
	"sort"
	"sync/atomic"
)

// Range is the address range [Start, End).
type Range struct{ Start, End uint64 }

// Normalize sorts rs and merges overlapping or touching ranges, dropping
// empty ones.
func Normalize(rs []Range) []Range {
	var in []Range
	for _, r := range rs {
		if r.End > r.Start {
			in = append(in, r)
		}
	}
	sort.Slice(in, func(i, j int) bool { return in[i].Start < in[j].Start })
	var out []Range
	for _, r := range in {
		if n := len(out); n > 0 && r.Start <= out[n-1].End {
			out[n-1].End = max(out[n-1].End, r.End)
			continue
		}
		out = append(out, r)
	}
	return out
}

// trimVisits is the number of kept ranges the last WriteTrimmed looked at
// (each segment's binary search aside): its cost, which the tests bound.
var trimVisits atomic.Uint64

// WriteTrimmed writes a copy of f that holds every note but only the bytes
// of its PT_LOADs that lie in keep (addresses in f's address space). Each
// PT_LOAD is split at the kept ranges: kept pieces carry their bytes, the
// rest stay as segments with p_filesz 0 (memory that existed but is not in
// the file, as a core of unreadable pages is written), so the result is a
// valid ELF core that gdb and this package read.
func WriteTrimmed(w io.Writer, f *File, keep []Range) error {
	keep = Normalize(keep)
	type piece struct {
		p    Prog
		orig Prog   // the segment it comes from
		from uint64 // offset into the original segment
		data bool
	}
	var out []piece
	var notes [][]byte
	var visits uint64 // ranges looked at, over all segments
	defer func() { trimVisits.Store(visits) }()
	progs := f.Progs
	if f.shared {
		// The merged segments: the originals overlap.
		progs = nil
		for _, p := range f.Progs {
			if p.Type != PTLoad {
				progs = append(progs, p)
			}
		}
		progs = append(progs, f.Loads...)
	}
	for _, p := range progs {
		switch p.Type {
		case PTNote:
			b := make([]byte, p.FileSz)
			if _, err := f.R.ReadAt(b, int64(p.Off)); err != nil {
				return f.errf(fmt.Sprintf("segment %d", p.Index), int64(p.Off), "read: %v", err)
			}
			notes = append(notes, b)
			out = append(out, piece{p: p})
		case PTLoad:
			base := f.addr(p)
			cur := uint64(0)
			emit := func(to uint64, data bool) {
				if to <= cur {
					return
				}
				q := p
				q.VAddr, q.PAddr = p.VAddr+cur, p.PAddr+cur
				q.MemSz = to - cur
				q.FileSz = 0
				if data {
					q.FileSz = min(to, p.FileSz) - cur
				}
				out = append(out, piece{p: q, orig: p, from: cur, data: data})
				cur = to
			}
			// keep is sorted and disjoint: start at the first range
			// ending after base, stop at the first starting at or
			// after the segment's end.
			first := sort.Search(len(keep), func(i int) bool { return keep[i].End > base })
			for _, r := range keep[first:] {
				visits++
				if r.Start >= base+p.MemSz {
					break
				}
				s := max(r.Start, base) - base
				e := min(r.End-base, p.MemSz)
				// Bytes beyond p_filesz were not in the file: keep
				// them as not held.
				if s >= p.FileSz {
					continue
				}
				e = min(e, p.FileSz)
				emit(s, false)
				emit(e, true)
			}
			emit(p.MemSz, false)
		default:
			out = append(out, piece{p: p})
		}
	}
	if len(out) > MaxProgs {
		return fmt.Errorf("%s: trimmed core would need %d segments (max %d)", f.Name, len(out), MaxProgs)
	}
	le := binary.LittleEndian
	off := uint64(ehdrSize + phdrSize*len(out))
	ni := 0
	for i := range out {
		pc := &out[i]
		switch {
		case pc.p.Type == PTNote:
			pc.p.Off = off
			off += uint64(len(notes[ni]))
			ni++
		case pc.p.Type == PTLoad && pc.p.FileSz > 0:
			off = (off + 4095) &^ 4095
			pc.p.Off = off
			off += pc.p.FileSz
		default:
			pc.p.Off = off
		}
	}
	var h [ehdrSize]byte
	copy(h[:], "\x7fELF\x02\x01\x01")
	le.PutUint16(h[16:], f.Type)
	le.PutUint16(h[18:], f.Mach)
	le.PutUint32(h[20:], 1)
	le.PutUint64(h[32:], ehdrSize)
	le.PutUint16(h[52:], ehdrSize)
	le.PutUint16(h[54:], phdrSize)
	le.PutUint16(h[56:], uint16(len(out)))
	le.PutUint16(h[58:], 64) // e_shentsize, as Linux writes it
	hdr := append(make([]byte, 0, ehdrSize+phdrSize*len(out)), h[:]...)
	for _, pc := range out {
		var b [phdrSize]byte
		p := pc.p
		le.PutUint32(b[0:], p.Type)
		le.PutUint32(b[4:], p.Flags)
		le.PutUint64(b[8:], p.Off)
		le.PutUint64(b[16:], p.VAddr)
		le.PutUint64(b[24:], p.PAddr)
		le.PutUint64(b[32:], p.FileSz)
		le.PutUint64(b[40:], p.MemSz)
		le.PutUint64(b[48:], p.Align)
		hdr = append(hdr, b[:]...)
	}
	if _, err := w.Write(hdr); err != nil {
		return err
	}
	pos := uint64(len(hdr))
	ni = 0
	buf := make([]byte, 1<<16)
	for i, pc := range out {
		if pc.p.Type == PTNote {
			if _, err := w.Write(notes[ni]); err != nil {
				return err
			}
			pos += uint64(len(notes[ni]))
			ni++
			continue
		}
		if pc.p.Type != PTLoad || pc.p.FileSz == 0 {
			continue
		}
		if pad := pc.p.Off - pos; pad > 0 {
			if _, err := w.Write(make([]byte, pad)); err != nil {
				return err
			}
			pos += pad
		}
		src := pc.orig.Off + pc.from
		for n := pc.p.FileSz; n > 0; {
			k := min(n, uint64(len(buf)))
			if _, err := f.R.ReadAt(buf[:k], int64(src)); err != nil {
				return f.errf(fmt.Sprintf("piece %d", i), int64(src), "read: %v", err)
			}
			if _, err := w.Write(buf[:k]); err != nil {
				return err
			}
			n, src, pos = n-k, src+k, pos+k
		}
	}
	return nil
}
