package main

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
)

// A gzip-compressed input is bounded once decompressed by inflateBudget
// plus a ratio of its compressed size: deflate expands up to 1,032 times,
// so without the ratio a 1 MB file decompresses to 1 GiB. The shipped
// inputs expand at most 76 times (the user cores, 2.7 KB to 200 KB) and
// their large files at most 12 times (the vmcores).
const (
	inflateBudget = 64 << 20
	// coreRatio bounds a core or vmcore, decompressed into a temporary
	// file (disk, not memory).
	coreRatio = 128
	// objectRatio bounds an executable or library, which core.Load needs
	// in memory.
	objectRatio = 16
)

// errTooLarge is returned for a compressed input that decompresses to
// more than its bound.
var errTooLarge = errors.New("decompresses to more than the bound")

// input is an opened input file, its bytes (decompressed when it is
// gzip) readable at any offset.
type input struct {
	io.ReaderAt
	size  int64
	close func() error
}

// openInput opens path. A gzip file (by its magic, whatever its name) is decompressed
// into a temporary file, removed by close, stopping at inflateBudget +
// ratio × its compressed size: the bound is checked while inflating, so a
// gzip bomb costs no more than that in time and disk and a fixed buffer in
// memory. A regular file of size 0 (procfs: /proc/kallsyms) is read
// whole into memory, at most 64 MiB. Other files are read in place.
func openInput(path string, ratio int64) (*input, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	if st.Size() == 0 {
		// procfs (/proc/kallsyms) gives regular files of size 0 with
		// content: read it whole, bounded.
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, inflateBudget+1))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(b) > inflateBudget {
			return nil, fmt.Errorf("%s: a file without a size holds more than %d bytes", path, inflateBudget)
		}
		return &input{ReaderAt: bytes.NewReader(b), size: int64(len(b)), close: func() error { return nil }}, nil
	}
	// gzip by its content (the magic 1f 8b), whatever the name.
	var magic [2]byte
	if n, _ := f.ReadAt(magic[:], 0); n < 2 || magic != [2]byte{0x1f, 0x8b} {
		return &input{ReaderAt: f, size: st.Size(), close: f.Close}, nil
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	limit := inflateBudget + ratio*st.Size()
	tmp, err := os.CreateTemp("", "unwinddump-*")
	if err != nil {
		return nil, err
	}
	cleanup := func() error {
		err := tmp.Close()
		if rerr := os.Remove(tmp.Name()); err == nil {
			err = rerr
		}
		return err
	}
	n, err := io.Copy(tmp, io.LimitReader(zr, limit+1))
	if err != nil {
		cleanup()
		return nil, fmt.Errorf("%s: offset %d decompressed: %w", path, n, err)
	}
	if n > limit {
		cleanup()
		return nil, fmt.Errorf("%s: %w of %d bytes (%d MiB plus %d bytes per compressed byte, of which there are %d): decompress it to read it as is",
			path, errTooLarge, limit, inflateBudget>>20, ratio, st.Size())
	}
	return &input{ReaderAt: tmp, size: n, close: cleanup}, nil
}

// readObject reads an executable or library (decompressed if its name ends
// in .gz) into memory, allocating its size once.
func readObject(path string) ([]byte, error) {
	in, err := openInput(path, objectRatio)
	if err != nil {
		return nil, err
	}
	defer in.close()
	if in.size > int64(^uint(0)>>1) {
		return nil, fmt.Errorf("%s: %d bytes: too large for memory", path, in.size)
	}
	b := make([]byte, in.size)
	if _, err := in.ReadAt(b, 0); err != nil && !(errors.Is(err, io.EOF) && len(b) == 0) {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return b, nil
}
