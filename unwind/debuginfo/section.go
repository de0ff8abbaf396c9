package debuginfo

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
)

// maxInflate bounds a compressed section's decompressed size: at most
// inflateRatio times the file's size plus inflateBudget. Real debug
// sections compress 3 to 8 times; a larger claim is refused before any
// memory is allocated for it.
const (
	inflateRatio  = 16
	inflateBudget = 64 << 20
)

// section is one debug section's bytes, loaded once.
type section struct {
	data []byte
	err  error
}

// readerAtBytes serves ReadAt from a mapped file.
type readerAtBytes []byte

func (b readerAtBytes) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off > int64(len(b)) {
		return 0, io.EOF
	}
	n := copy(p, b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// sectionData returns the named section's contents (nil, nil when the
// file has none): a slice of the mapping when the file is mapped and the
// section is stored plainly, else the section read (and decompressed) once.
func (f *File) sectionData(name string) ([]byte, error) {
	if s, ok := f.secs[name]; ok {
		return s.data, s.err
	}
	data, err := f.loadSection(name)
	f.secs[name] = &section{data, err}
	return data, err
}

func (f *File) loadSection(name string) ([]byte, error) {
	s := f.ef.Section(name)
	if s == nil || s.Type == elf.SHT_NOBITS {
		return nil, nil
	}
	if s.Offset > uint64(f.size) || s.FileSize > uint64(f.size)-s.Offset {
		return nil, fmt.Errorf("%s: %w: section %s at file offset %#x, size %#x, runs past the end of the file (%#x bytes)",
			f.name, ErrCorrupt, name, s.Offset, s.FileSize, f.size)
	}
	if s.Flags&elf.SHF_COMPRESSED == 0 {
		if f.mem != nil {
			return f.mem[s.Offset : s.Offset+s.FileSize : s.Offset+s.FileSize], nil
		}
		buf := make([]byte, s.FileSize)
		if _, err := f.ra.ReadAt(buf, int64(s.Offset)); err != nil {
			return nil, fmt.Errorf("%s: section %s at file offset %#x: %w", f.name, name, s.Offset, err)
		}
		return buf, nil
	}
	// SHF_COMPRESSED: debug/elf has parsed the Chdr; s.Size is ch_size.
	limit := uint64(f.size)*inflateRatio + inflateBudget
	if s.Size > limit {
		return nil, fmt.Errorf("%s: %w: compressed section %s at file offset %#x claims %d bytes decompressed, more than the %d allowed for a %d-byte file",
			f.name, ErrCorrupt, name, s.Offset, s.Size, limit, f.size)
	}
	buf := make([]byte, s.Size)
	r := s.Open()
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, fmt.Errorf("%s: %w: compressed section %s at file offset %#x: %v", f.name, ErrCorrupt, name, s.Offset, err)
	}
	return buf, nil
}

// infoBytes returns n bytes of .debug_info at off (fewer at its end).
// With the file mapped, or .debug_info compressed (then it is loaded
// whole), it is a slice; else it is read from the file.
func (f *File) infoBytes(off, n uint64) ([]byte, error) {
	s := f.ef.Section(".debug_info")
	if s.Flags&elf.SHF_COMPRESSED != 0 || f.mem != nil {
		info, err := f.sectionData(".debug_info")
		if err != nil {
			return nil, err
		}
		if off > uint64(len(info)) {
			return nil, nil
		}
		n = min(n, uint64(len(info))-off)
		return info[off : off+n : off+n], nil
	}
	if off > s.FileSize {
		return nil, nil
	}
	n = min(n, s.FileSize-off)
	if s.Offset > uint64(f.size) || s.Offset+off+n > uint64(f.size) {
		return nil, fmt.Errorf("%s: %w: .debug_info at file offset %#x runs past the end of the file (%#x bytes)",
			f.name, ErrCorrupt, s.Offset, f.size)
	}
	buf := make([]byte, n)
	if _, err := f.ra.ReadAt(buf, int64(s.Offset+off)); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: .debug_info at offset %#x: %w", f.name, off, err)
	}
	return buf, nil
}

// infoSize is the size of .debug_info (decompressed).
func (f *File) infoSize() uint64 {
	s := f.ef.Section(".debug_info")
	if s.Flags&elf.SHF_COMPRESSED != 0 {
		return s.Size
	}
	return s.FileSize
}
