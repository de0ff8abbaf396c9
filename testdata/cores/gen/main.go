// Command gen trims a core file written by qemu-aarch64 to what unwinding
// and gdb need, and writes it gzip-compressed:
//
//	go run ./testdata/cores/gen IN.core OUT.core.gz
//
// It keeps, of each thread's stack segment, the part from one page below
// sp to the segment's end; every other writable segment of at most 1 MiB
// (the shadow call stack, data, the dynamic linker's link map); and small
// segments that no file backs (qemu's signal trampoline page). Executable
// code is left out: gdb and this module read it from the executable. The
// result is a valid ELF core (dropped parts stay as segments without bytes).
package main

import (
	"compress/gzip"
	"fmt"
	"os"

	"github.com/unwindkit/unwindkit/unwind/core"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: gen IN.core OUT.core.gz")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run(in, out string) error {
	c, err := core.Open(in, "")
	if err != nil {
		return err
	}
	defer c.Close()
	var keep [][2]uint64
	for _, s := range c.Segments() {
		end := s.Addr + s.Size
		stack := false
		for _, t := range c.Threads {
			if t.Regs.SP >= s.Addr && t.Regs.SP < end {
				stack = true
				keep = append(keep, [2]uint64{max(s.Addr, (t.Regs.SP&^0xfff)-0x1000), end})
			}
		}
		switch {
		case stack:
		case s.Flags&2 != 0 && s.Size <= 1<<20:
			keep = append(keep, [2]uint64{s.Addr, end})
		case s.Flags&2 == 0 && s.Size <= 2<<12:
			keep = append(keep, [2]uint64{s.Addr, end})
		}
	}
	r, err := os.Open(in)
	if err != nil {
		return err
	}
	defer r.Close()
	st, err := r.Stat()
	if err != nil {
		return err
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	zw, _ := gzip.NewWriterLevel(f, gzip.BestCompression)
	if err := core.Trim(zw, in, r, st.Size(), keep); err != nil {
		f.Close()
		return err
	}
	if err := zw.Close(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
