package unwind

import (
	"fmt"
	"iter"
	"strconv"

	"github.com/unwindkit/unwindkit/fp"
	"github.com/unwindkit/unwindkit/internal/errs"
	"github.com/unwindkit/unwindkit/internal/gcsview"
	"github.com/unwindkit/unwindkit/scs"
)

// Errors. ErrNotSupported and ErrCorrupt are unwindkit's shared sentinels,
// the same values in every package.
var (
	// ErrNotSupported: the asked-for mechanism is absent (the shadow call
	// stack or frame pointers are off, or this GOARCH keeps no frame
	// pointers). errors.Is(err, unix.ENOSYS) is true.
	ErrNotSupported = errs.ErrNotSupported
	// ErrCorrupt is wrapped by every *CorruptError.
	ErrCorrupt = errs.ErrCorrupt
	// ErrUnreliable: a reliable FP walk (SaveOptions.Reliable) cannot
	// vouch for its trace; the same value as fp.ErrUnreliable.
	ErrUnreliable = errs.ErrUnreliable
	// ErrInterruptedTopHidden: the SCS copy reached a context whose x18 the
	// OnStack policy left on the interrupted stack.
	ErrInterruptedTopHidden = scs.ErrInterruptedTopHidden
)

// Method selects an unwinding technique. Its String is "auto", "scs",
// "fp" or "gcs".
type Method uint8

//go:generate go tool stringer -type=Method -linecomment -output=source_string.go

const (
	// MethodAuto is the shadow call stack copy when the shadow call stack
	// is on, else the frame-pointer walk.
	MethodAuto Method = iota // auto
	// MethodSCS copies return addresses off the shadow call stack.
	MethodSCS // scs
	// MethodFP walks frame records.
	MethodFP // fp
	// MethodGCS copies return addresses off arm64's Guarded Control
	// Stack, the hardware shadow stack of user space (package
	// unwind/gcs models it). MethodAuto never resolves to it.
	MethodGCS // gcs
)

// Resolve returns the technique m stands for where the shadow call stack
// is on (scsOn) or off: MethodAuto is MethodSCS when it is on, else
// MethodFP; any other method is itself. It is the one place MethodAuto is
// decided (the machine model, snapshots and cores call it).
func (m Method) Resolve(scsOn bool) Method {
	if m != MethodAuto {
		return m
	}
	if scsOn {
		return MethodSCS
	}
	return MethodFP
}

// ParseMethod returns the Method whose String is name: "auto", "scs",
// "fp" or "gcs".
func ParseMethod(name string) (Method, error) {
	for _, m := range []Method{MethodAuto, MethodSCS, MethodFP, MethodGCS} {
		if m.String() == name {
			return m, nil
		}
	}
	return 0, fmt.Errorf("unwind: unknown method %q (want auto, scs, fp or gcs)", name)
}

// MarshalText implements encoding.TextMarshaler: the method's String. An
// unknown method is an error.
func (m Method) MarshalText() ([]byte, error) {
	if _, err := ParseMethod(m.String()); err != nil {
		return nil, err
	}
	return []byte(m.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler, so flag.TextVar
// parses a method (see [ParseMethod]).
func (m *Method) UnmarshalText(text []byte) error {
	v, err := ParseMethod(string(text))
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// Source is what an unwinder reads: a shadow call stack, a frame chain or
// a Guarded Control Stack with the memory it lives in, at one moment.
// Build one with [NewSCSSource], [NewFPSource] or [NewGCSSource] over an
// [scs.View], an [fp.Config] or a GCS's bytes, or get one from a product
// above the front door (a modelled CPU or task, a snapshot). Once built
// it is immutable; Save and Frames may be called on it any number of
// times, concurrently.
type Source struct {
	method Method // MethodSCS, MethodFP or MethodGCS
	scs    scs.View
	fp     fp.Config
	gcs    gcsview.View
	skip   int // frames removed before every Save's and Frames' own skip
	sym    *Symbolizer
}

// SourceOptions are what a Source adds to the unwinder's own descriptor.
type SourceOptions struct {
	// Symbolizer names frames ([Source.Name]); nil names them in hex.
	Symbolizer *Symbolizer
	// Skip removes this many frames from the innermost end of every Save
	// and Frames, before Save's own skip: for a walk that starts at the
	// pc of the function the unwinder runs in (Skip 1 drops that pc, so
	// the first frame is its caller's, as for an unwinder inlined in it).
	Skip int
}

// NewSCSSource returns a Source that copies the shadow call stack v
// describes (see [scs.View]; a crash-dump tool builds one over memory it
// read itself). The Source keeps a copy of *v.
func NewSCSSource(v *scs.View, opts SourceOptions) *Source {
	src := new(Source)
	src.SetSCS(v, opts)
	return src
}

// NewFPSource returns a Source that walks the frame records c describes
// (see [fp.Config]). The Source keeps a copy of *c.
func NewFPSource(c *fp.Config, opts SourceOptions) *Source {
	src := new(Source)
	src.SetFP(c, opts)
	return src
}

// NewGCSSource returns a Source that copies a thread's Guarded Control
// Stack: data is its memory from base on (as read from a dump or a
// capture, little-endian), gcspr its GCSPR_EL0; the copy reads the
// entries from gcspr up to the top marker, passing over signal cap tokens
// (package unwind/gcs describes the GCS; its View holds the same three
// values). A nil data gives ErrNotSupported (no GCS). The Source keeps
// data, which must not change while it is used.
func NewGCSSource(data []byte, base, gcspr uint64, opts SourceOptions) *Source {
	src := new(Source)
	src.SetGCS(data, base, gcspr, opts)
	return src
}

// SetGCS makes src the Source [NewGCSSource] returns, in place and
// without allocating. It must not run concurrently with other uses of src.
func (src *Source) SetGCS(data []byte, base, gcspr uint64, opts SourceOptions) {
	src.method, src.skip, src.sym = MethodGCS, opts.Skip, opts.Symbolizer
	src.gcs = gcsview.View{Disabled: data == nil, Data: data, Base: base, GCSPR: gcspr}
}

// SetSCS makes src the Source [NewSCSSource] returns, in place and without
// allocating: for hot paths that record a trace on every event. It must
// not run concurrently with other uses of src.
func (src *Source) SetSCS(v *scs.View, opts SourceOptions) {
	src.method, src.scs, src.skip, src.sym = MethodSCS, *v, opts.Skip, opts.Symbolizer
}

// SetFP makes src the Source [NewFPSource] returns, in place and without
// allocating. It must not run concurrently with other uses of src.
func (src *Source) SetFP(c *fp.Config, opts SourceOptions) {
	src.method, src.fp, src.skip, src.sym = MethodFP, *c, opts.Skip, opts.Symbolizer
}

// SCSView returns a copy of the shadow call stack view a MethodSCS source
// copies; ok is false for another method.
func (src *Source) SCSView() (v scs.View, ok bool) {
	return src.scs, src.method == MethodSCS
}

// FPConfig returns a copy of the walk configuration a MethodFP source
// walks; ok is false for another method.
func (src *Source) FPConfig() (c fp.Config, ok bool) {
	return src.fp, src.method == MethodFP
}

// Method returns the technique the source unwinds with.
func (s *Source) Method() Method { return s.method }

// Save copies the return addresses of src into store, innermost first,
// after removing skip frames, and returns how many it stored. A full store
// is not an error. A walk that fails part-way returns the frames it had
// and an error: ErrCorrupt (wrapped), ErrInterruptedTopHidden, or
// ErrNotSupported.
func Save(src *Source, store []uint64, skip int) (int, error) {
	switch src.method {
	case MethodSCS:
		return scs.Save(&src.scs, store, skip+src.skip)
	case MethodGCS:
		return gcsview.Save(&src.gcs, store, skip+src.skip)
	}
	return fp.Save(&src.fp, store, skip+src.skip)
}

// Origin says where a Frame's PC came from: the module's one origin enum,
// [fp.Origin], whose constants name the values (fp.OriginSCS,
// fp.OriginFrame, ...; the zero value, fp.OriginUnknown, is no origin).
// Its String is the origin's lowercase name, e.g. "regs-pc".
type Origin = fp.Origin

// Frame is one unwound frame with its provenance: the module's one
// frame type, [fp.Frame]. [Source.Name] names it; [scs.ContextOf] gives
// the context of its Stack.
type Frame = fp.Frame

// Frames returns src's frames with provenance, innermost first. The final
// pair carries the walk's error, if any, with a zero Frame.
func (src *Source) Frames() iter.Seq2[Frame, error] {
	return func(yield func(Frame, error) bool) {
		switch src.method {
		case MethodSCS:
			src.skipThen(scs.Frames(&src.scs), src.skip, yield)
		case MethodGCS:
			src.skipThen(gcsFrames(&src.gcs), src.skip, yield)
		default:
			src.skipThen(fp.Frames(&src.fp), src.skip, yield)
		}
	}
}

// AppendFrames appends src's frames ([Source.Frames]) to dst and returns
// the extended slice with the error the walk ended with, if any: the
// frames before the error are kept, as a dump reader reports a walk that
// failed part-way.
func (src *Source) AppendFrames(dst []Frame) ([]Frame, error) {
	for f, err := range src.Frames() {
		if err != nil {
			return dst, err
		}
		dst = append(dst, f)
	}
	return dst, nil
}

// gcsFrames yields the entries of a GCS as frames: origin fp.OriginGCS,
// Addr the slot (GCS entries carry no PAC: Raw is PC).
func gcsFrames(v *gcsview.View) iter.Seq2[Frame, error] {
	return func(yield func(Frame, error) bool) {
		for e, err := range gcsview.Entries(v) {
			if err != nil {
				yield(Frame{}, err)
				return
			}
			if !yield(Frame{PC: e.PC, Raw: e.PC, Addr: e.Addr, Origin: fp.OriginGCS}, nil) {
				return
			}
		}
	}
}

// skipThen yields the frames of seq after the first skip and ends with
// seq's error, if any.
func (src *Source) skipThen(seq iter.Seq2[Frame, error], skip int, yield func(Frame, error) bool) {
	for f, err := range seq {
		if err != nil {
			yield(Frame{}, err)
			return
		}
		if skip > 0 {
			skip--
			continue
		}
		if !yield(f, nil) {
			return
		}
	}
}

// Name names pc with the Source's Symbolizer (function+offset, as
// [Symbolizer.Name] gives it), or in hex ("0xffff800080012345") when the
// Source has none: frames carry no name, so a consumer names only the
// frames it prints.
func (src *Source) Name(pc uint64) string {
	if src.sym == nil {
		var b [18]byte // "0x" and 16 hex digits: one allocation, the string
		return string(strconv.AppendUint(append(b[:0], "0x"...), pc, 16))
	}
	return src.sym.Name(pc)
}
