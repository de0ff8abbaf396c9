// Command gen trims a core file written by qemu-aarch64 or Linux to what
// unwinding and gdb need, and writes it gzip-compressed:
//
//	go run ./testdata/cores/gen [-gcs] IN.core OUT.core.gz
//
// It keeps, of each thread's stack segment, the part from one page below
// sp to the segment's end; of each thread's Guarded Control Stack
// (NT_ARM_GCS, GCS enabled), the part from one page below GCSPR_EL0 to the
// end of its mapping (Linux sizes it at half the stack limit, 4 MiB for
// 8 MiB, almost all of it unused slots below the pointer); every other
// writable segment of at most 1 MiB (the shadow call stack, data, the
// dynamic linker's link map); and small segments that no file backs
// (qemu's signal trampoline page, the vDSO with Linux's). Executable code
// is left out: gdb and this module read it from the executable. The
// result is a valid ELF core (dropped parts stay as segments without
// bytes). With -gcs (testdata/arm64/gcs/kcore.sh) a core in which no
// thread's GCSPR_EL0 lies in a segment is an error.
package main

import (
	"compress/gzip"
	"flag"
	"fmt"
	"os"

	"github.com/unwindkit/unwindkit/unwind/core"
)

func main() {
	needGCS := flag.Bool("gcs", false, "fail unless some thread's GCS is in the core")
	flag.Parse()
	if flag.NArg() != 2 {
		fmt.Fprintln(os.Stderr, "usage: gen [-gcs] IN.core OUT.core.gz")
		os.Exit(2)
	}
	if err := run(flag.Arg(0), flag.Arg(1), *needGCS); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run(in, out string, needGCS bool) error {
	c, err := core.Open(in, "")
	if err != nil {
		return err
	}
	defer c.Close()
	var keep [][2]uint64
	gcs := 0
	for _, s := range c.Segments() {
		end := s.Addr + s.Size
		stack := false
		// Each thread's sp, and its GCSPR_EL0 where its GCS is on: keep
		// from one page below the pointer's page to the segment's end.
		for _, t := range c.Threads {
			tops := []uint64{t.Regs.SP}
			if t.HasGCS && t.GCS.Enabled() {
				tops = append(tops, t.GCS.GCSPR)
			}
			for i, a := range tops {
				if a >= s.Addr && a < end {
					stack = true
					keep = append(keep, [2]uint64{max(s.Addr, (a&^0xfff)-0x1000), end})
					gcs += i
				}
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
	if needGCS && gcs == 0 {
		return fmt.Errorf("%s: no thread's GCSPR_EL0 (NT_ARM_GCS) is in a segment", in)
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
