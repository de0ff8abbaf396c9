package main

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/unwindkit/unwindkit/unwind"
	"github.com/unwindkit/unwindkit/unwind/core"
	"github.com/unwindkit/unwindkit/unwind/vmcore"
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
	return dumpELFCore(w, io.Discard, path, objs, &options{method: "both", cpu: -1, pid: -1})
}

// dumpELFCore reads the ELF core at path once and unwinds it: as a kernel
// vmcore when it has a VMCOREINFO note (files are then symbol sources),
// else as a user core (files are its executable and libraries).
func dumpELFCore(w, stderr io.Writer, path string, files []string, o *options) error {
	src, err := openInput(path, coreRatio)
	if err != nil {
		return err
	}
	defer src.close()
	v, vmErr := vmcore.Load(path, src, src.size)
	if vmErr == nil && v.Virtual {
		// /proc/kcore's format: opened again by vmcore.Open, which
		// tells the running kernel's memory (procfs) from a snapshot.
		if lv, err := vmcore.Open(path); err == nil {
			defer lv.Close()
			v = lv
		}
	}
	if vmErr == nil && v.HasInfo {
		if o.gcs() {
			return fmt.Errorf("%w: %s is a vmcore: -method gcs is for user cores and snapshots (the kernel's stacks have no GCS)", errUsage, path)
		}
		return dumpKernelCore(w, stderr, path, v, files, o)
	}
	also := ""
	if vmErr != nil {
		also = fmt.Sprintf(" (as a vmcore: %v)", vmErr)
	}
	if o.tasks || o.cpu >= 0 || o.task != 0 || o.info || o.btf != "" {
		return fmt.Errorf("%w: %s is a user core (no VMCOREINFO note%s): -tasks, -cpu, -task, -info and -btf are for vmcores", errUsage, path, also)
	}
	if len(files) == 0 {
		return fmt.Errorf("%s: a core file needs its executable: unwinddump CORE EXE [LIB...]; it has no VMCOREINFO note, so it is no vmcore%s", path, also)
	}
	var objs []core.ObjectFile
	var names []string
	for _, f := range files {
		if k, err := sniff(f); err != nil {
			return err
		} else if k != kindELF {
			return fmt.Errorf("%w: %s is %s, not an executable or library of the core %s", errUsage, f, k, path)
		}
		d, err := readObject(f)
		if err != nil {
			return err
		}
		objs = append(objs, core.ObjectFile{Path: strings.TrimSuffix(f, ".gz"), Data: d})
		names = append(names, f)
	}
	c, err := core.Load(path, src, src.size, objs...)
	if err != nil {
		if vmErr != nil {
			return fmt.Errorf("%w%s", err, also)
		}
		return err
	}
	for _, m := range c.Warnings {
		fmt.Fprintf(stderr, "unwinddump: warning: %s\n", m)
	}
	// The DWARF of each file given, at the bias its object was loaded at.
	for i, of := range objs {
		for _, ob := range c.Objects {
			if ob.File == of.Path {
				o.lines.add(stderr, names[i], bytes.NewReader(of.Data), int64(len(of.Data)), ob.Bias)
				break
			}
		}
	}
	defer o.lines.close()
	if o.json {
		return coreJSON(w, c, o)
	}
	return printCore(w, c, o)
}

func printCore(w io.Writer, c *core.Core, o *options) error {
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
	shown := 0
	for i := range c.Threads {
		t := &c.Threads[i]
		if o.pid >= 0 && t.PID != o.pid {
			continue
		}
		shown++
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
		fmt.Fprintf(w, "guarded control stack: %s\n", gcsState(t))
		if o.gcs() {
			fs, err := c.Frames(t, unwind.MethodGCS)
			if err := printGCS(w, sym, fs, err); err != nil {
				return err
			}
			o.lines.printSources(w, "GCS copy", userFrames(sym, fs))
			continue
		}
		cmp := c.Compare(t)
		if err := printMethod(w, sym, cmp, o); err != nil {
			return err
		}
		if scsF, fpF := splitRows(cmp); len(o.lines.files) > 0 {
			if _, useFP := o.methods(); useFP {
				o.lines.printSources(w, "FP walk", userFrames(sym, fpF))
			} else {
				o.lines.printSources(w, "SCS copy", userFrames(sym, scsF))
			}
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
	if o.pid >= 0 && shown == 0 {
		return fmt.Errorf("%s: no thread of pid %d", c.Path, o.pid)
	}
	return nil
}

// gcsState describes thread t's Guarded Control Stack from its NT_ARM_GCS
// note.
func gcsState(t *core.Thread) string {
	switch {
	case !t.HasGCS:
		return "none (no NT_ARM_GCS note)"
	case !t.GCS.Enabled():
		return fmt.Sprintf("off (NT_ARM_GCS features_enabled %#x)", t.GCS.FeaturesEnabled)
	}
	return fmt.Sprintf("GCSPR_EL0 %#x, features enabled %#x, locked %#x (NT_ARM_GCS)", t.GCS.GCSPR, t.GCS.FeaturesEnabled, t.GCS.FeaturesLocked)
}
