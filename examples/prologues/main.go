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

	"github.com/unwindkit/unwindkit/unwind"
	"github.com/unwindkit/unwindkit/unwind/prologue"
	"github.com/unwindkit/unwindkit/unwind/snapshot"
)

func main() {
	if len(os.Args) < 2 || len(os.Args) > 3 {
		fmt.Fprintln(os.Stderr, "usage: prologues FILE.elf [SNAPSHOT.json]")
		os.Exit(2)
	}
	b, err := prologue.OpenBinary(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("# %s: %d functions from %s\n", os.Args[1], len(b.Funcs()), b.SymbolTables())
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
	s, err := snapshot.Open(path)
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 1, ' ', 0)
	fmt.Fprintf(w, "\nFROM\tRAW\tRETURN\tSYMBOL\tCALL BEFORE?\tINSTRUCTION\n")
	for _, method := range []unwind.Method{unwind.MethodSCS, unwind.MethodFP} {
		src, err := s.Source(method)
		if err != nil {
			fmt.Fprintf(w, "%v\t-\t-\t-\t-\t%v\n", method, err)
			continue
		}
		for fr, err := range src.Frames() {
			if err != nil {
				fmt.Fprintf(w, "%v\t-\t-\t-\t-\t%v\n", method, err)
				break
			}
			cs, cerr := b.CallBefore(fr.PC)
			call, insn := "no", cs.Insn
			if cerr != nil {
				call, insn = "?", cerr.Error()
			} else if cs.Call {
				call = "yes"
			}
			fmt.Fprintf(w, "%v %v\t%#x\t%#x\t%s\t%s\t%s\n", method, fr.Origin, fr.Raw, fr.PC, src.Name(fr.PC), call, insn)
		}
	}
	return w.Flush()
}
