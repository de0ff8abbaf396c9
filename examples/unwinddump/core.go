package main

import (
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/unwindkit/unwindkit/unwind/core"
)

// isELF reports whether the file at path (gzip-compressed if it ends in
// .gz) starts with the ELF magic.
func isELF(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(f)
		if err != nil {
			return false
		}
		r = zr
	}
	var b [4]byte
	_, err = io.ReadFull(r, b[:])
	return err == nil && string(b[:]) == "\x7fELF"
}

// dumpCore prints every thread of the core file at path, unwound with both
// techniques, side by side. Files ending in .gz are decompressed.
func dumpCore(w io.Writer, path string, objs []string) error {
	if len(objs) == 0 {
		return fmt.Errorf("%s: a core file needs its executable: unwinddump CORE EXE [LIB...]", path)
	}
	src, err := openInput(path, coreRatio)
	if err != nil {
		return err
	}
	defer src.close()
	var files []core.ObjectFile
	for _, o := range objs {
		d, err := readObject(o)
		if err != nil {
			return err
		}
		files = append(files, core.ObjectFile{Path: strings.TrimSuffix(o, ".gz"), Data: d})
	}
	c, err := core.Load(path, src, src.size, files...)
	if err != nil {
		return err
	}
	return printCore(w, c)
}

func printCore(w io.Writer, c *core.Core) error {
	sym := c.Symbolizer()
	fmt.Fprintf(w, "core %s: %d thread(s), command %q\n", c.Path, len(c.Threads), c.Command)
	hw, hw2 := c.HWCap()
	fmt.Fprintf(w, "pac layout: %s; hwcap %#x (PACA %v), hwcap2 %#x\n", c.LayoutFrom, hw, hw&core.HWCapPACA != 0, hw2)
	if c.HasTaggedAddrCtrl {
		fmt.Fprintf(w, "tagged address control: %#x\n", c.TaggedAddrCtrl)
	}
	for _, o := range c.Objects {
		file := o.File
		if file == "" {
			file = "(not given: frames shown as addresses)"
		}
		fmt.Fprintf(w, "object %s: bias %#x (%s), %d symbols from %s\n", o.Path, o.Bias, o.BiasFrom, o.Symbols, file)
	}
	for _, m := range c.Warnings {
		fmt.Fprintf(w, "warning: %s\n", m)
	}
	for i := range c.Threads {
		t := &c.Threads[i]
		r := &t.Regs
		fmt.Fprintf(w, "\nthread %d (pid %d, signal %d)\n", i, t.PID, t.Signal)
		fmt.Fprintf(w, "regs: pc %s, sp %#x, x18 %#x, x29 %#x, x30 %#x (%s)\n", sym.Name(c.Layout.Strip(r.PC)),
			r.SP, r.X[18], r.X[29], r.X[30], sym.Name(c.Layout.Strip(r.X[30])))
		if t.HasSCS {
			how := "the start of the mapping holding x18"
			if t.SCSGuarded {
				how += ", between guard pages"
			}
			if t.SCSBaseGuessed {
				how += " (a guess: the core records no shadow stack bounds)"
			}
			fmt.Fprintf(w, "shadow call stack: base %#x, %s\n", t.SCSBase, how)
		} else {
			fmt.Fprintf(w, "shadow call stack: none (%s)\n", t.SCSNote)
		}
		cmp := c.Compare(t)
		if err := printRows(w, sym, cmp); err != nil {
			return err
		}
		if pc, ok := c.X30Only(t); ok {
			fmt.Fprintf(w, "x30 %#x (%s): a return address in no frame record and no SCS slot: the crashing function had not saved it (a leaf); both techniques miss this caller\n", pc, sym.Name(pc))
		}
		if cmp.SCSErr != nil {
			fmt.Fprintf(w, "scs ended with: %v\n", cmp.SCSErr)
		}
		if cmp.FPErr != nil {
			fmt.Fprintf(w, "fp ended with: %v\n", cmp.FPErr)
		}
	}
	return nil
}
