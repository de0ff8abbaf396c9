// Command kcoregen trims a Linux core of the GCS test program (kcore.sh)
// to what the unwinders and gdb need, and writes it gzip-compressed:
//
//	go run ./testdata/arm64/gcs/kcoregen IN.core OUT.core.gz
//
// It keeps, per thread, the stack segment from one page below sp to its
// end and the Guarded Control Stack from one page below GCSPR_EL0's page
// (dead entries below the pointer) to the end of its mapping
// (NT_ARM_GCS); every other writable segment of at most 1 MiB
// (the shadow call stacks, data); and non-writable segments of at most
// two pages (the vDSO with the sigreturn trampoline, ELF headers). The
// rest of each GCS (unused slots below GCSPR_EL0, 4 MiB with an 8 MiB
// stack limit) and of the stacks stays as segments without bytes, so the
// result is still a valid ELF core.
package main

import (
	"compress/gzip"
	"fmt"
	"os"

	"github.com/unwindkit/unwindkit/unwind/core"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: kcoregen IN.core OUT.core.gz")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "kcoregen:", err)
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
	gcs := 0
	for _, s := range c.Segments() {
		end := s.Addr + s.Size
		held := false
		for _, t := range c.Threads {
			for _, a := range []uint64{t.Regs.SP, t.GCS.GCSPR} {
				if (a == t.Regs.SP || t.HasGCS && t.GCS.Enabled()) && a >= s.Addr && a < end {
					held = true
					keep = append(keep, [2]uint64{max(s.Addr, (a&^0xfff)-0x1000), end})
					if a == t.GCS.GCSPR {
						gcs++
					}
				}
			}
		}
		switch {
		case held:
		case s.Flags&2 != 0 && s.Size <= 1<<20:
			keep = append(keep, [2]uint64{s.Addr, end})
		case s.Flags&2 == 0 && s.Size <= 2<<12:
			keep = append(keep, [2]uint64{s.Addr, end})
		}
	}
	if gcs == 0 {
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
