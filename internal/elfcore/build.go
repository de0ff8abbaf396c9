package elfcore

import "encoding/binary"

// Builder assembles an ELF64 little-endian arm64 core in memory: the
// tests' synthetic cores and vmcores.
type Builder struct {
	Notes []BNote
	Loads []BLoad
}

// BNote is a note to write.
type BNote struct {
	Name string
	Type uint32
	Desc []byte
}

// BLoad is a PT_LOAD to write: Data are its file bytes, MemSz (at least
// len(Data)) its size in memory.
type BLoad struct {
	VAddr, PAddr uint64
	Flags        uint32
	MemSz        uint64
	Data         []byte
}

// AppendNote encodes one note (name and desc padded to 4 bytes).
func AppendNote(b []byte, n BNote) []byte {
	le := binary.LittleEndian
	name := append([]byte(n.Name), 0)
	b = le.AppendUint32(b, uint32(len(name)))
	b = le.AppendUint32(b, uint32(len(n.Desc)))
	b = le.AppendUint32(b, n.Type)
	b = append(b, name...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	b = append(b, n.Desc...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// Bytes returns the core.
func (bd *Builder) Bytes() []byte {
	le := binary.LittleEndian
	var notes []byte
	for _, n := range bd.Notes {
		notes = AppendNote(notes, n)
	}
	nph := len(bd.Loads) + 1
	off := uint64(ehdrSize + phdrSize*nph)
	h := make([]byte, ehdrSize)
	copy(h, "\x7fELF\x02\x01\x01")
	le.PutUint16(h[16:], ETCore)
	le.PutUint16(h[18:], EMAArch64)
	le.PutUint32(h[20:], 1)
	le.PutUint64(h[32:], ehdrSize)
	le.PutUint16(h[52:], ehdrSize)
	le.PutUint16(h[54:], phdrSize)
	le.PutUint16(h[56:], uint16(nph))
	ph := func(typ, flags uint32, o, va, pa, fsz, msz uint64) {
		var b [phdrSize]byte
		le.PutUint32(b[0:], typ)
		le.PutUint32(b[4:], flags)
		le.PutUint64(b[8:], o)
		le.PutUint64(b[16:], va)
		le.PutUint64(b[24:], pa)
		le.PutUint64(b[32:], fsz)
		le.PutUint64(b[40:], msz)
		h = append(h, b[:]...)
	}
	ph(PTNote, 0, off, 0, 0, uint64(len(notes)), 0)
	off += uint64(len(notes))
	for _, l := range bd.Loads {
		ph(PTLoad, l.Flags, off, l.VAddr, l.PAddr, uint64(len(l.Data)), max(l.MemSz, uint64(len(l.Data))))
		off += uint64(len(l.Data))
	}
	h = append(h, notes...)
	for _, l := range bd.Loads {
		h = append(h, l.Data...)
	}
	return h
}
