package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/pprof/profile"
	"github.com/unwindkit/unwindkit/depot"
	"github.com/unwindkit/unwindkit/unwind/live"
)

// callers is the live unwinder: live.Callers, unwindkit's frame-pointer
// drop-in for runtime.Callers (same skip meaning, same frames after
// runtime.CallersFrames).
var callers = live.Callers

// liveDepth is the number of frames the live tracker records.
const liveDepth = 64

// liveTrack is the live counterpart of struct kasan_track: a task id and
// a 32-bit depot handle.
type liveTrack struct {
	task  uint32
	stack depot.Handle
}

// liveObj is a tracked allocation.
type liveObj struct {
	data  []byte
	freed atomic.Bool
	// alloc is written once before the object is published; free is
	// written by the kfree that wins the freed flag.
	alloc liveTrack
	free  liveTrack
}

// liveStat counts the allocations of one stack.
type liveStat struct {
	allocs, bytes, inuse, inuseBytes int64
}

// liveReport is a KASAN-style report of the live tracker.
type liveReport struct {
	Kind, Where       string
	Task              uint32
	AllocTask         uint32
	FreeTask          uint32
	Alloc, Free, Here []string // function names, innermost first
	text              string
}

// liveTracker records an allocation and a free stack for each object into
// a depot, using the live unwinder, and exports the allocation stacks as a
// pprof profile.
type liveTracker struct {
	d       *depot.Depot
	mu      sync.Mutex
	stats   map[depot.Handle]*liveStat
	reports []liveReport
	start   time.Time
}

func newLiveTracker() (*liveTracker, error) {
	d, err := depot.New(depot.Config{MaxFrames: liveDepth})
	if err != nil {
		return nil, err
	}
	return &liveTracker{d: d, stats: map[depot.Handle]*liveStat{}, start: time.Now()}, nil
}

// save records the stack of the function that called kmalloc or kfree:
// skip callers itself, save, alloc or release, and kmalloc or kfree, so
// the first frame is the allocation or free site, as in the model.
//
//go:noinline
func (t *liveTracker) save() depot.Handle {
	var pcs [liveDepth]uintptr
	n := callers(4, pcs[:])
	h, err := t.d.SavePCs(pcs[:n])
	if err != nil {
		return 0 // the depot is full or the stack empty: no stack, as KASAN
	}
	return h
}

//go:noinline
func (t *liveTracker) alloc(task uint32, size int) *liveObj {
	h := t.save()
	o := &liveObj{data: make([]byte, size), alloc: liveTrack{task, h}}
	t.mu.Lock()
	st := t.stats[h]
	if st == nil {
		st = &liveStat{}
		t.stats[h] = st
	}
	st.allocs++
	st.bytes += int64(size)
	st.inuse++
	st.inuseBytes += int64(size)
	t.mu.Unlock()
	return o
}

//go:noinline
func (t *liveTracker) release(task uint32, o *liveObj) {
	if o.freed.Swap(true) {
		t.report("double-free", task, o)
		return
	}
	o.free = liveTrack{task, t.save()}
	t.mu.Lock()
	st := t.stats[o.alloc.stack]
	st.inuse--
	st.inuseBytes -= int64(len(o.data))
	t.mu.Unlock()
}

//go:noinline
func (t *liveTracker) check(task uint32, o *liveObj) {
	if o.freed.Load() {
		t.report("use-after-free", task, o)
	}
}

// report builds a report; the current stack starts at the function that
// called kfree or the checked access.
func (t *liveTracker) report(kind string, task uint32, o *liveObj) {
	var pcs [liveDepth]uintptr
	n := callers(4, pcs[:])
	r := liveReport{Kind: kind, Task: task, AllocTask: o.alloc.task, FreeTask: o.free.task}
	r.Here = funcNames(pcs[:n])
	if len(r.Here) > 0 {
		r.Where = r.Here[0]
	}
	var buf []uintptr
	if o.alloc.stack != 0 {
		buf, _ = t.d.FetchPCs(o.alloc.stack, buf[:0])
		r.Alloc = funcNames(buf)
	}
	if o.free.stack != 0 {
		buf, _ = t.d.FetchPCs(o.free.stack, buf[:0])
		r.Free = funcNames(buf)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "BUG: KASAN: %s in %s (live Go)\n", kind, r.Where)
	fmt.Fprintf(&b, "by task %d; current stack:\n", task)
	writeFrames(&b, pcs[:n])
	fmt.Fprintf(&b, "Allocated by task %d:\n", o.alloc.task)
	buf, _ = t.d.FetchPCs(o.alloc.stack, buf[:0])
	writeFrames(&b, buf)
	fmt.Fprintf(&b, "Freed by task %d:\n", o.free.task)
	buf, _ = t.d.FetchPCs(o.free.stack, buf[:0])
	writeFrames(&b, buf)
	r.text = b.String()
	t.mu.Lock()
	t.reports = append(t.reports, r)
	t.mu.Unlock()
}

func funcNames(pcs []uintptr) []string {
	var out []string
	frames := runtime.CallersFrames(pcs)
	for {
		f, more := frames.Next()
		if f.Function != "" {
			out = append(out, f.Function)
		}
		if !more {
			return out
		}
	}
}

func writeFrames(w io.Writer, pcs []uintptr) {
	if len(pcs) == 0 {
		fmt.Fprintln(w, " (stack is not available)")
		return
	}
	frames := runtime.CallersFrames(pcs)
	for {
		f, more := frames.Next()
		file := f.File
		if i := strings.LastIndex(file, "/"); i >= 0 {
			file = file[i+1:]
		}
		fmt.Fprintf(w, " %s (%s:%d)\n", f.Function, file, f.Line)
		if !more {
			return
		}
	}
}

// Profile returns the recorded allocation stacks as a pprof heap-style
// profile: alloc_objects, alloc_space, inuse_objects, inuse_space.
func (t *liveTracker) Profile() (*profile.Profile, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	exe, _ := os.Executable()
	p := &profile.Profile{
		SampleType: []*profile.ValueType{
			{Type: "alloc_objects", Unit: "count"},
			{Type: "alloc_space", Unit: "bytes"},
			{Type: "inuse_objects", Unit: "count"},
			{Type: "inuse_space", Unit: "bytes"},
		},
		DefaultSampleType: "alloc_space",
		PeriodType:        &profile.ValueType{Type: "space", Unit: "bytes"},
		Period:            1,
		TimeNanos:         t.start.UnixNano(),
		DurationNanos:     time.Since(t.start).Nanoseconds(),
		Comments:          []string{"unwindkit examples/kasan live allocation tracker (" + liveUnwinderName + " + depot)"},
	}
	mapping := &profile.Mapping{ID: 1, Start: 0, Limit: ^uint64(0), File: exe,
		HasFunctions: true, HasFilenames: true, HasLineNumbers: true, HasInlineFrames: true}
	p.Mapping = []*profile.Mapping{mapping}
	type locKey struct {
		pc   uintptr
		fn   string
		line int
	}
	locs := map[locKey]*profile.Location{}
	funcs := map[string]*profile.Function{}
	// Stable order: by handle.
	handles := make([]depot.Handle, 0, len(t.stats))
	for h := range t.stats {
		handles = append(handles, h)
	}
	slices.Sort(handles)
	var buf []uintptr
	for _, h := range handles {
		st := t.stats[h]
		s := &profile.Sample{Value: []int64{st.allocs, st.bytes, st.inuse, st.inuseBytes}}
		if h != 0 {
			var err error
			buf, err = t.d.FetchPCs(h, buf[:0])
			if err != nil {
				return nil, err
			}
			frames := runtime.CallersFrames(buf)
			for {
				f, more := frames.Next()
				k := locKey{f.PC, f.Function, f.Line}
				loc := locs[k]
				if loc == nil {
					fn := funcs[f.Function]
					if fn == nil {
						fn = &profile.Function{ID: uint64(len(p.Function) + 1), Name: f.Function,
							SystemName: f.Function, Filename: f.File}
						funcs[f.Function] = fn
						p.Function = append(p.Function, fn)
					}
					loc = &profile.Location{ID: uint64(len(p.Location) + 1), Mapping: mapping,
						Address: uint64(f.PC), Line: []profile.Line{{Function: fn, Line: int64(f.Line)}}}
					locs[k] = loc
					p.Location = append(p.Location, loc)
				}
				s.Location = append(s.Location, loc)
				if !more {
					break
				}
			}
		}
		p.Sample = append(p.Sample, s)
	}
	return p, p.CheckValid()
}

// WriteProfile writes the profile, gzipped protobuf, to w.
func (t *liveTracker) WriteProfile(w io.Writer) error {
	p, err := t.Profile()
	if err != nil {
		return err
	}
	return p.Write(w)
}

// liveUnwinderName names the live unwinder behind callers.
const liveUnwinderName = "live.Callers"
