package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/unwindkit/unwindkit/fp"
	"github.com/unwindkit/unwindkit/unwind"
	"github.com/unwindkit/unwindkit/unwind/core"
	"github.com/unwindkit/unwindkit/unwind/kernel"
	"github.com/unwindkit/unwindkit/unwind/snapshot"
)

// schemaVersion is the version of the -json document (README: "-json").
// It changes only when a field changes meaning or goes away; fields may
// be added without changing it.
const schemaVersion = 1

// jsonDoc is the -json document: the input and one object per walked
// stack.
type jsonDoc struct {
	Schema int    `json:"schema"`
	Input  string `json:"input"`
	// Kind is "vmcore", "core" or "snapshot".
	Kind string `json:"kind"`
	// Kernel is the vmcore's OSRELEASE ("" for the others).
	Kernel string      `json:"kernel"`
	Notes  []string    `json:"notes"`
	Stacks []jsonStack `json:"stacks"`
}

// jsonStack is one walked stack.
type jsonStack struct {
	// Kind is "cpu" (a vmcore's CPU from its registers), "task" (a
	// vmcore's task), "thread" (a user core's thread) or "snapshot".
	Kind string `json:"kind"`
	// CPU is the CPU the stack was walked from (a cpu, or a task running
	// on one), -1 otherwise.
	CPU int `json:"cpu"`
	// PID, Comm and State describe the task or thread (-1, "", "" when
	// unknown); State is the letter the kernel prints (R, S, D, I, ...)
	// and StateRaw task->__state. Task is the task_struct's address.
	PID      int    `json:"pid"`
	Comm     string `json:"comm"`
	State    string `json:"state"`
	StateRaw uint64 `json:"state_raw"`
	Task     string `json:"task"`
	// FP and SCS are the two techniques' walks; a technique -method did
	// not select, or one the kernel lacks, is null. GCS is the Guarded
	// Control Stack copy of a thread or snapshot, only with -method gcs.
	FP  *jsonWalk `json:"fp"`
	SCS *jsonWalk `json:"scs"`
	GCS *jsonWalk `json:"gcs"`
	// Notes say what decided the walk; Errors are its errors (each
	// prefixed by its technique).
	Notes  []string `json:"notes"`
	Errors []string `json:"errors"`
}

// jsonWalk is one technique's frames, innermost first.
type jsonWalk struct {
	Frames []jsonFrame `json:"frames"`
	// End is "final" (the task's final frame record), "limit", "error"
	// or "" when the technique says nothing of its end.
	End   string `json:"end"`
	Error string `json:"error"`
}

// jsonFrame is one frame. Addresses are hex strings ("0x..."): JSON
// numbers lose 64-bit precision in most decoders.
type jsonFrame struct {
	PC     string `json:"pc"`  // after the PAC strip
	Raw    string `json:"raw"` // as stored, before the PAC strip
	Symbol string `json:"symbol"`
	Offset uint64 `json:"offset"`
	Size   uint64 `json:"size"`
	// Printed is the frame as the kernel prints it (%pS:
	// func+0xoff/0xsize) or as the user-space symbolizer names it.
	Printed string `json:"printed"`
	Origin  string `json:"origin"`
	Stack   string `json:"stack"`
	// File and Line are the source position ("" and 0 without DWARF);
	// Inlined are the functions inlined at the pc, innermost first.
	File    string        `json:"file"`
	Line    int           `json:"line"`
	Inlined []jsonInlined `json:"inlined"`
}

// jsonInlined is one function inlined at a frame's pc.
type jsonInlined struct {
	Function string `json:"function"`
	File     string `json:"file"`
	Line     int    `json:"line"`
}

func hex(v uint64) string { return fmt.Sprintf("%#x", v) }

func writeJSON(w io.Writer, d *jsonDoc) error {
	for i := range d.Stacks {
		s := &d.Stacks[i]
		if s.Notes == nil {
			s.Notes = []string{}
		}
		if s.Errors == nil {
			s.Errors = []string{}
		}
	}
	if d.Notes == nil {
		d.Notes = []string{}
	}
	if d.Stacks == nil {
		d.Stacks = []jsonStack{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", " ")
	return enc.Encode(d)
}

func endName(e fp.End) string {
	switch e {
	case fp.EndFinal:
		return "final"
	case fp.EndStopped:
		return "limit"
	}
	return "error"
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func kernelFrames(k *kernel.Kernel, fs []unwind.Frame) []jsonFrame {
	out := make([]jsonFrame, 0, len(fs))
	for _, f := range fs {
		jf := jsonFrame{PC: hex(f.PC), Raw: hex(f.Raw), Printed: k.Format(f.PC), Origin: f.Origin.String(), Stack: f.Stack.String(), Inlined: []jsonInlined{}}
		if s, ok := k.Sym(f.PC); ok && (s.Size == 0 || f.PC-s.Addr < s.Size) {
			jf.Symbol, jf.Offset, jf.Size = s.Name, f.PC-s.Addr, s.Size
		}
		if f.Origin == fp.OriginSCS {
			jf.Origin, jf.Stack = "scs", "scs"
		}
		out = append(out, jf)
	}
	return out
}

// kernelJSON writes the selected stacks of a vmcore.
func kernelJSON(w io.Writer, path string, k *kernel.Kernel, notes []string, rep *kernel.Report, sel []kstack, o *options) error {
	d := &jsonDoc{Schema: schemaVersion, Input: path, Kind: "vmcore", Kernel: k.V.Info.OSRelease, Notes: notes}
	useSCS, useFP := o.methods()
	for i := range sel {
		s := &sel[i]
		js := jsonStack{Kind: s.kind, CPU: s.cpu, PID: -1, Notes: s.notes, Errors: s.errs}
		if t := s.task; t != nil {
			js.Task = hex(t.Addr)
			js.PID = t.PID
			if t.PID >= 0 {
				js.Comm, js.State, js.StateRaw = t.Comm, taskState(t.State), t.State
			}
		}
		if useFP {
			js.FP = &jsonWalk{Frames: kernelFrames(k, s.res.Frames), End: endName(s.res.End), Error: errString(s.res.Err)}
			o.lines.fill(js.FP.Frames)
		}
		if useSCS && !isNotSupported(s.scsErr) {
			js.SCS = &jsonWalk{Frames: kernelFrames(k, s.scs), Error: errString(s.scsErr)}
			o.lines.fill(js.SCS.Frames)
			if s.scsErr != nil {
				js.SCS.End = "error"
			}
		}
		d.Stacks = append(d.Stacks, js)
	}
	return writeJSON(w, d)
}

func userFrames(sym *unwind.Symbolizer, fs []unwind.Frame) []jsonFrame {
	out := make([]jsonFrame, 0, len(fs))
	for _, f := range fs {
		jf := jsonFrame{PC: hex(f.PC), Raw: hex(f.Raw), Printed: sym.Name(f.PC), Origin: f.Origin.String(), Stack: f.Stack.String(), Inlined: []jsonInlined{}}
		if s, off, ok := sym.Lookup(f.PC); ok {
			jf.Symbol, jf.Offset, jf.Size = s.Name, off, s.Size
		}
		switch f.Origin {
		case fp.OriginSCS:
			jf.Stack = "scs"
		case fp.OriginGCS:
			jf.Stack = "gcs"
		}
		out = append(out, jf)
	}
	return out
}

// gcsStack is the JSON object of one GCS copy (-method gcs): its frames
// and the error it ended with.
func gcsStack(kind string, pid int, sym *unwind.Symbolizer, fs []unwind.Frame, err error, o *options) jsonStack {
	js := jsonStack{Kind: kind, CPU: -1, PID: pid}
	js.GCS = &jsonWalk{Frames: userFrames(sym, fs), Error: errString(err)}
	o.lines.fill(js.GCS.Frames)
	if err != nil {
		js.GCS.End = "error"
		js.Errors = append(js.Errors, "gcs: "+err.Error())
	}
	return js
}

// userStack is the JSON object of one comparison (a thread or a
// snapshot).
func userStack(kind string, pid int, sym *unwind.Symbolizer, cmp *unwind.Comparison, o *options) jsonStack {
	js := jsonStack{Kind: kind, CPU: -1, PID: pid}
	scsF, fpF := splitRows(cmp)
	useSCS, useFP := o.methods()
	if useFP {
		js.FP = &jsonWalk{Frames: userFrames(sym, fpF), Error: errString(cmp.FPErr)}
		o.lines.fill(js.FP.Frames)
		if cmp.FPErr != nil {
			js.FP.End = "error"
			js.Errors = append(js.Errors, "fp: "+cmp.FPErr.Error())
		}
	}
	if useSCS {
		js.SCS = &jsonWalk{Frames: userFrames(sym, scsF), Error: errString(cmp.SCSErr)}
		o.lines.fill(js.SCS.Frames)
		if cmp.SCSErr != nil {
			js.SCS.End = "error"
			js.Errors = append(js.Errors, "scs: "+cmp.SCSErr.Error())
		}
	}
	if useSCS && useFP {
		for i, r := range cmp.Rows {
			if r.Note != "" {
				js.Notes = append(js.Notes, fmt.Sprintf("row %d: %s", i, r.Note))
			}
		}
	}
	return js
}

func coreJSON(w io.Writer, c *core.Core, o *options) error {
	d := &jsonDoc{Schema: schemaVersion, Input: c.Path, Kind: "core", Notes: append([]string{"pac layout: " + c.LayoutFrom}, c.Warnings...)}
	sym := c.Symbolizer()
	for i := range c.Threads {
		t := &c.Threads[i]
		if o.pid >= 0 && t.PID != o.pid {
			continue
		}
		if o.gcs() {
			fs, err := c.Frames(t, unwind.MethodGCS)
			js := gcsStack("thread", t.PID, sym, fs, err, o)
			js.Notes = append(js.Notes, "guarded control stack: "+gcsState(t))
			d.Stacks = append(d.Stacks, js)
			continue
		}
		js := userStack("thread", t.PID, sym, c.Compare(t), o)
		if !t.HasSCS {
			js.Notes = append(js.Notes, "no shadow call stack: "+t.SCSNote)
		} else if t.SCSBaseGuessed {
			js.Notes = append(js.Notes, fmt.Sprintf("shadow call stack base %#x: a guess (the start of the mapping holding x18)", t.SCSBase))
		}
		if pc, ok := c.X30Only(t); ok {
			js.Notes = append(js.Notes, fmt.Sprintf("x30 %#x (%s): a return address in no frame record and no SCS slot (a leaf): both techniques miss this caller", pc, sym.Name(pc)))
		}
		d.Stacks = append(d.Stacks, js)
	}
	if o.pid >= 0 && len(d.Stacks) == 0 {
		return fmt.Errorf("%s: no thread of pid %d", c.Path, o.pid)
	}
	return writeJSON(w, d)
}

func snapshotJSON(w io.Writer, path string, s *snapshot.Snapshot, o *options) error {
	sym := s.Symbolizer()
	if o.gcs() {
		fs, err := sourceFrames(s.Source(unwind.MethodGCS))
		d := &jsonDoc{Schema: schemaVersion, Input: path, Kind: "snapshot"}
		d.Stacks = append(d.Stacks, gcsStack("snapshot", -1, sym, fs, err, o))
		return writeJSON(w, d)
	}
	traces := map[unwind.Method][]unwind.Frame{}
	var errsOf [2]error
	for i, m := range []unwind.Method{unwind.MethodSCS, unwind.MethodFP} {
		src, err := s.Source(m)
		if err != nil {
			errsOf[i] = err
			continue
		}
		for fr, err := range src.Frames() {
			if err != nil {
				errsOf[i] = err
				break
			}
			traces[m] = append(traces[m], fr)
		}
	}
	cmp := unwind.CompareTraces(sym, traces[unwind.MethodSCS], traces[unwind.MethodFP])
	cmp.SCSErr, cmp.FPErr = errsOf[0], errsOf[1]
	d := &jsonDoc{Schema: schemaVersion, Input: path, Kind: "snapshot"}
	d.Stacks = append(d.Stacks, userStack("snapshot", -1, sym, cmp, o))
	return writeJSON(w, d)
}
