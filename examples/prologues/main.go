// Command prologues prints, for each function of an arm64 ELF file, what
// its code does for the unwinders: shadow-call-stack push and pop,
// return-address signing and authentication (key A or B), frame record,
// BTI, patchable-entry NOPs, the ftrace "mov x9, x30", and calls.
//
// Usage:
//
//	go run ./examples/prologues FILE.elf [SNAPSHOT.json]
//
// With a snapshot taken from FILE.elf (testdata/arm64/snapshots), it also
// checks every return address the unwinders would report, from the shadow
// call stack and from the frame records: is the instruction before it a
// call?
package main

import (
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/unwindkit/unwindkit/internal/prologue"
	"github.com/unwindkit/unwindkit/internal/snapshot"
)

func main() {
	if len(os.Args) < 2 || len(os.Args) > 3 {
		fmt.Fprintln(os.Stderr, "usage: prologues FILE.elf [SNAPSHOT.json]")
		os.Exit(2)
	}
	b, err := prologue.Open(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 1, ' ', 0)
	fmt.Fprintln(w, "ADDR\tSIZE\tFUNCTION\tSCS\tSIGN\tAUTH\tFRAME\tBTI\tNOPS\tMOVX9\tCALLS")
	yn := func(b bool) string {
		if b {
			return "yes"
		}
		return "-"
	}
	for _, f := range b.Funcs() {
		scs := "-"
		switch {
		case f.SCSPush && f.SCSPop:
			scs = "push+pop"
		case f.SCSPush:
			scs = "push"
		case f.SCSPop:
			scs = "pop"
		}
		sign := f.Sign.String()
		if f.SignBeforePush {
			sign += " (before push)"
		}
		calls := fmt.Sprint(f.Calls)
		if f.Leaf() {
			calls = "leaf"
		}
		fmt.Fprintf(w, "%#x\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", f.Addr, f.Size, f.Name, scs, sign,
			f.Auth, yn(f.FrameRecord), yn(f.BTI), f.EntryNOPs, yn(f.FtraceMovX9), calls)
	}
	w.Flush()
	if len(os.Args) == 3 {
		if err := checkSnapshot(b, os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}

func checkSnapshot(b *prologue.Binary, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	s, err := snapshot.Load(f)
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 1, ' ', 0)
	fmt.Fprintf(w, "\nFROM\tRAW\tRETURN\tSYMBOL\tCALL BEFORE?\tINSTRUCTION\n")
	show := func(from string, raw uint64) {
		ret := s.Layout.Strip(raw)
		cs, err := b.CallBefore(ret)
		call, insn := "no", cs.Insn
		if err != nil {
			call, insn = "?", err.Error()
		} else if cs.Call {
			call = "yes"
		}
		fmt.Fprintf(w, "%s\t%#x\t%#x\t%s\t%s\t%s\n", from, raw, ret, s.Symbols.Format(ret), call, insn)
	}
	if s.HasSCS {
		for a := s.Regs.X18 - 8; a >= s.SCSBase && a < s.Regs.X18; a -= 8 {
			v, ok := s.Memory.Load(a)
			if !ok {
				break
			}
			show(fmt.Sprintf("scs %#x", a), v)
		}
	}
	// Frame records: within a stack fp must increase; a stack left behind
	// (the signal altstack, say) is never entered again.
	left := map[uint64]bool{}
	var cur, low uint64
	for fp := s.Regs.X29; fp != 0; {
		r := s.Memory.Find(fp)
		if r == nil || left[r.Base] {
			break
		}
		if r.Base != cur {
			left[cur], cur, low = true, r.Base, 0
		}
		if fp < low {
			break
		}
		next, ok1 := s.Memory.Load(fp)
		lr, ok2 := s.Memory.Load(fp + 8)
		if !ok1 || !ok2 {
			break
		}
		show(fmt.Sprintf("fp %#x", fp), lr)
		low, fp = fp+16, next
	}
	return w.Flush()
}
