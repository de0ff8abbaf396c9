package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// kind is what a file given to the command holds, recognised by its
// content (kindOf), never by its name or place among the arguments.
type kind int

const (
	kindUnknown  kind = iota
	kindCapture       // a directory holding expected.json
	kindCore          // an ELF ET_CORE: a vmcore when it has VMCOREINFO, else a user core
	kindSnapshot      // a JSON document
	kindELF           // an ELF executable or shared object (vmlinux, a program, a library)
	kindSymText       // "ADDR TYPE NAME" lines: System.map or /proc/kallsyms
	kindBTF           // raw BTF (magic 0xeb9f)
)

func (k kind) String() string {
	return [...]string{"an unrecognised file", "a kernel capture directory", "an ELF core", "a JSON document",
		"an ELF executable or library", "a symbol map (System.map or /proc/kallsyms text)", "raw BTF"}[k]
}

// sniffLen is how much of a file kindOf reads (decompressed).
const sniffLen = 4096

// sniff reads the start of path (inflating a gzip file) and says what it
// holds. An unreadable file is an error.
func sniff(path string) (kind, error) {
	st, err := os.Stat(path)
	if err != nil {
		return kindUnknown, err
	}
	if st.IsDir() {
		if isKernelCapture(path) {
			return kindCapture, nil
		}
		return kindUnknown, fmt.Errorf("%s: a directory without expected.json is no kernel capture", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return kindUnknown, err
	}
	defer f.Close()
	var r io.Reader = f
	var magic [2]byte
	if n, _ := f.ReadAt(magic[:], 0); n == 2 && magic == [2]byte{0x1f, 0x8b} {
		zr, err := gzip.NewReader(f)
		if err != nil {
			return kindUnknown, fmt.Errorf("%s: %w", path, err)
		}
		r = zr
	}
	b := make([]byte, sniffLen)
	n, err := io.ReadFull(r, b)
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return kindUnknown, fmt.Errorf("%s: %w", path, err)
	}
	return kindOf(b[:n]), nil
}

// kindOf says what a file starting with b holds.
func kindOf(b []byte) kind {
	if len(b) >= 18 && string(b[:4]) == "\x7fELF" {
		if binary.LittleEndian.Uint16(b[16:]) == uint16(elf.ET_CORE) {
			return kindCore
		}
		return kindELF
	}
	if len(b) >= 4 && binary.LittleEndian.Uint16(b) == 0xeb9f && b[2] == 1 {
		return kindBTF
	}
	t := bytes.TrimLeft(b, " \t\r\n")
	if len(t) > 0 && (t[0] == '{' || t[0] == '[') {
		return kindSnapshot
	}
	// A symbol map: its first line is ADDR TYPE NAME [MODULE] (the
	// last line read may be cut).
	sc := bufio.NewScanner(bytes.NewReader(b))
	if sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 3 && len(f) <= 4 && len(f[1]) == 1 {
			if _, err := strconv.ParseUint(f[0], 16, 64); err == nil {
				return kindSymText
			}
		}
	}
	return kindUnknown
}
