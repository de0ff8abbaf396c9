package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/unwindkit/unwindkit/fp"
	"github.com/unwindkit/unwindkit/unwind/debuginfo"
)

// debugFile is the DWARF of one ELF file given to the command, and the
// amount its addresses run above their link-time ones (a library's load
// bias, a kernel's KERNELOFFSET).
type debugFile struct {
	f    *debuginfo.File
	name string
	bias uint64
}

// lines looks up file:line and inlined frames in the DWARF of the files
// given (those that have it); the zero value looks up nothing.
type lines struct {
	files []debugFile
}

// add opens the DWARF of the ELF file name (r, size bytes) if it has
// any; a file without DWARF is no error, a malformed one a warning.
func (l *lines) add(stderr io.Writer, name string, r io.ReaderAt, size int64, bias uint64) {
	f, err := debuginfo.NewFile(name, r, size)
	if errors.Is(err, debuginfo.ErrNoDWARF) {
		return
	}
	if err != nil {
		fmt.Fprintf(stderr, "unwinddump: warning: %s: DWARF not used: %v\n", name, err)
		return
	}
	l.files = append(l.files, debugFile{f: f, name: name, bias: bias})
}

func (l *lines) close() {
	for _, d := range l.files {
		d.f.Close()
	}
}

// source is a frame's position: the concrete function's file:line (the
// call site of what was inlined, or the pc's own line) and the functions
// inlined at the pc, innermost first.
type source struct {
	file    string
	line    int
	inlined []jsonInlined
}

// lookup returns pc's source position; atPC says pc is the instruction
// itself (a stopped pc, an exception's pc), else it is a return address,
// looked up at the call (pc - 4). ok is false when no file describes pc.
func (l *lines) lookup(pc uint64, atPC bool) (source, bool) {
	kind := debuginfo.ReturnAddress
	if atPC {
		kind = debuginfo.PC
	}
	for _, d := range l.files {
		if pc < d.bias {
			continue
		}
		fs, err := d.f.Lookup(pc-d.bias, kind)
		if err != nil || len(fs) == 0 {
			continue
		}
		last := fs[len(fs)-1]
		s := source{file: last.File, line: last.Line, inlined: []jsonInlined{}}
		for _, f := range fs[:len(fs)-1] {
			s.inlined = append(s.inlined, jsonInlined{Function: f.Func, File: f.File, Line: f.Line})
		}
		return s, true
	}
	return source{}, false
}

// String is the position as the text output prints it:
// "file:line", then each inlined function innermost first.
func (s source) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s:%d", s.file, s.line)
	for _, in := range s.inlined {
		fmt.Fprintf(&b, " (inlined %s at %s:%d)", in.Function, in.File, in.Line)
	}
	return b.String()
}

// atPC reports whether a frame of this origin is the instruction itself
// (a CPU's pc at a stop, an exception's pc, a thread's pc, the pc an
// interrupt took) rather than a return address, which is looked up at
// its call.
func atPC(origin string) bool {
	switch origin {
	case fp.OriginStopPC.String(), fp.OriginRegsPC.String(), fp.OriginCaller.String(), fp.OriginInterruptedPC.String():
		return true
	}
	return false
}

// fill sets the file, line and inlined frames of fs.
func (l *lines) fill(fs []jsonFrame) {
	if len(l.files) == 0 {
		return
	}
	for i := range fs {
		var pc uint64
		fmt.Sscanf(fs[i].PC, "0x%x", &pc)
		if s, ok := l.lookup(pc, atPC(fs[i].Origin)); ok {
			fs[i].File, fs[i].Line, fs[i].Inlined = s.file, s.line, s.inlined
		}
	}
}

// printSources prints the source position of each frame that has one.
func (l *lines) printSources(w io.Writer, what string, fs []jsonFrame) {
	if len(l.files) == 0 {
		return
	}
	l.fill(fs)
	fmt.Fprintf(w, "   %s source lines (DWARF):\n", what)
	for i, f := range fs {
		if f.File == "" && f.Line == 0 {
			continue
		}
		s := source{file: f.File, line: f.Line, inlined: f.Inlined}
		fmt.Fprintf(w, "   #%d %s at %s\n", i, f.Printed, s)
	}
}
