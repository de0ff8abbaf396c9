// Command gen trims a vmcore written by QEMU's dump-guest-memory to the
// physical pages that reading it needs, and writes it gzip-compressed:
//
//	go run ./testdata/vmcores/gen [-btf] IN.vmcore OUT.vmcore.gz
//
// It records every page read while the page-table format is checked,
// while the kallsyms tables are decoded, while one page at each CPU's sp
// is read and (with -btf) while the BTF is read, and keeps those pages
// plus every note.
package main

import (
	"compress/gzip"
	"flag"
	"fmt"
	"os"

	"github.com/unwindkit/unwindkit/unwind/vmcore"
)

func main() {
	btf := flag.Bool("btf", false, "keep the BTF pages too")
	flag.Parse()
	if flag.NArg() != 2 {
		fmt.Fprintln(os.Stderr, "usage: gen [-btf] IN.vmcore OUT.vmcore.gz")
		os.Exit(2)
	}
	if err := run(flag.Arg(0), flag.Arg(1), *btf); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run(in, out string, withBTF bool) error {
	v, err := vmcore.Open(in)
	if err != nil {
		return err
	}
	defer v.Close()
	// Opening read the pages that checked the translation format; record
	// them again, then everything else.
	v.RecordReads(true)
	if _, err := v.Translate(v.Info.SwapperPgDir); err != nil {
		return err
	}
	syms, err := v.Kallsyms()
	if err != nil {
		return err
	}
	for _, c := range v.CPUs {
		var b [8]byte
		if err := v.ReadVirt(b[:], c.Regs.SP); err != nil {
			fmt.Fprintf(os.Stderr, "gen: cpu pid %d: sp %#x: %v\n", c.PID, c.Regs.SP, err)
		}
	}
	if withBTF {
		if _, err := v.BTF(syms); err != nil {
			return err
		}
	}
	pages := v.PagesRead()
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	zw, _ := gzip.NewWriterLevel(f, gzip.BestCompression)
	if err := v.WriteTrimmed(zw, v.PagesToRanges(pages)); err != nil {
		f.Close()
		return err
	}
	if err := zw.Close(); err != nil {
		f.Close()
		return err
	}
	fmt.Fprintf(os.Stderr, "gen: %d symbols, kept %d pages\n", len(syms), len(pages))
	return f.Close()
}
