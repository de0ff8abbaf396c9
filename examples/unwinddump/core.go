package main

import (
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/unwindkit/unwindkit/unwind"
	"github.com/unwindkit/unwindkit/unwind/core"
)

// isELF reports whether the file at path starts with the ELF magic.
func isELF(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var b [4]byte
	_, err = io.ReadFull(f, b[:])
	return err == nil && string(b[:]) == "\x7fELF"
}

// dumpCore prints every thread of the core file at path, unwound with both
// techniques, side by side.
func dumpCore(w io.Writer, path string, objs []string) error {
	if len(objs) == 0 {
		return fmt.Errorf("%s: a core file needs its executable: unwinddump CORE EXE [LIB...]", path)
	}
	c, err := core.Open(path, objs[0], objs[1:]...)
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
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "#\tSCS raw\tSCS\tFP raw\tFP [source]\twhy they differ")
		cell := func(fr unwind.Frame, ok bool) (string, string) {
			if !ok {
				return "-", "-"
			}
			return fmt.Sprintf("%#x", fr.Raw), sym.Name(fr.PC)
		}
		for k, row := range cmp.Rows {
			sr, sn := cell(row.SCS, row.InSCS)
			fr, fn := cell(row.FP, row.InFP)
			if row.InFP {
				fn += " [" + row.FP.Source.String() + "]"
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", k, sr, sn, fr, fn, row.Note)
		}
		if err := tw.Flush(); err != nil {
			return err
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
