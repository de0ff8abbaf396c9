package live

import (
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/unwindkit/unwindkit/internal/needs"
)

// The walk loops must make no call (see "Stack moves" in walk.go): a call
// can grow the stack and move it under the walk's plain-number bound. The
// loops are written without calls; this test proves it on the compiled
// code, whatever the flags (CI also runs it with -gcflags=all=-N -l, where
// every helper is a real call): the loop functions call nothing but what
// walkProbe calls on its way out, and the runtime's stack-growth and
// bounds-failure entries.
func TestWalkLoopsCallNothing(t *testing.T) {
	if !Supported {
		t.Skip("no frame pointers")
	}
	goTool := needs.Go(t)
	// Compile this package as this test binary was compiled, printing
	// its assembly.
	gcflags := ""
	race := false
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "-gcflags":
				gcflags = s.Value
			case "-race":
				race = s.Value == "true"
			}
		}
	}
	asmOf := func(pkg string) map[string]string {
		args := []string{"build", "-gcflags=" + gcflags, "-gcflags=" + pkg + "=" + strings.TrimPrefix(gcflags, "all=") + " -S"}
		if race {
			args = append(args, "-race")
		}
		cmd := exec.Command(goTool, append(args, pkg)...)
		cmd.Env = append(os.Environ(), "GOARCH="+runtime.GOARCH)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %v: %v\n%s", args, err, out)
		}
		funcs := map[string]string{} // name -> its assembly
		var cur string
		for _, line := range strings.Split(string(out), "\n") {
			// A function's first line: its name (which may hold spaces,
			// in a generic instantiation's shape), then STEXT.
			if name, _, ok := strings.Cut(line, " STEXT "); ok && line[0] != '\t' && line[0] != ' ' {
				cur = strings.TrimPrefix(name, pkg+".")
				continue
			}
			funcs[cur] += line + "\n"
		}
		return funcs
	}
	funcs := asmOf("github.com/unwindkit/unwindkit/internal/live")
	allowed := map[string][]string{
		"walkProbe": {"live.rawEndWhy"}, // on its way out
		"rawWalk":   nil,
		"countWalk": {"live.FPLoop", "live.rawWalk", "live.skipRecords"}, // FPLoop: without optimisation
		"FPLoop":    nil,
		"skipFP":    nil,
		// CallersFP has skipFP's and FPLoop's loops inlined (calls
		// without optimisation): besides them, the load of stopPC (a call
		// without optimisation and in race builds) and getfp (NOSPLIT
		// assembly), all before a loop starts, it calls only walkFP,
		// after its loops have ended.
		"CallersFP": {"live.getfp", "live.skipFP", "live.FPLoop", "live.walkFP",
			"sync/atomic.(*Uintptr).Load"},
		"skipRecords": nil,
		// The stack ID's one pass: only the load of stopPC, before its
		// loop (the rotate is an intrinsic even without optimisation);
		// WalkHash and WalkFirst are walkHashOn from frame 0, and Hit
		// walks its first frames without a loop, then walkCompare's,
		// and counts its hit; the chance and CAS of a hit's confidence
		// after its loop. The rest: calls without optimisation.
		"walkHashOn":       {"sync/atomic.(*Uintptr).Load"},
		"walkCompare":      {"sync/atomic.(*Uintptr).Load"},
		"WalkHash":         {"live.walkHashOn"},
		"(*IDs).WalkFirst": {"live.walkHashOn"},
		"(*IDs).Hit": {"live.walkCompare", "sync/atomic.(*Uintptr).Load", "sync/atomic.(*Uint64).Load",
			"live.(*IDs).roll", "depotview.(*Rolls).Roll", "sync/atomic.(*Uint64).CompareAndSwap", "depotview.Shard", "tracehash.Finish",
			"live.hintSlot", "live.hintKey", "depotview.(*Layout).Frames", "depotview.(*Layout).CountHit", "sync/atomic.AddUint64"},
		// fastWalk's walk on past the first frame with inlined calls.
		"walkExpand": nil,
		// The whole-stack cache's hit walks its first frames as Hit
		// does, then walkCompare's, and copies the answer after the walk
		// (memmove, or slicecopy in race builds). The rest: calls
		// without optimisation.
		"wholeHit": {"live.walkCompare", "runtime.memmove", "runtime.slicecopy", "sync/atomic.(*Uintptr).Load", "sync/atomic.(*Uint64).Load",
			"sync/atomic.(*Pointer[" /* its Load */, "sync/atomic.LoadPointer", "live.wholeKey", "live.hintKey"},
	}
	if race {
		// The race detector's atomics are calls, but into NOSPLIT
		// assembly (runtime/race_$GOARCH.s): they cannot grow the stack.
		allowed["walkProbe"] = append(allowed["walkProbe"], "sync/atomic.LoadUintptr")
		allowed["walkExpand"] = []string{"sync/atomic.LoadUintptr", "sync/atomic.LoadPointer"}
	}
	// unwind/live.CallersFP has FPLoop inlined (a call without
	// optimisation); before it only FrameAndPC (NOSPLIT assembly) and
	// BoundaryKnown (its load of stopPC), after it CallersFPAt.
	public := asmOf("github.com/unwindkit/unwindkit/unwind/live")
	if public["CallersFP"] == "" {
		t.Fatal("no assembly for unwind/live.CallersFP in the compiler's output")
	}
	funcs["unwind/live.CallersFP"] = public["CallersFP"]
	allowed["unwind/live.CallersFP"] = []string{"live.FrameAndPC", "live.BoundaryKnown", "live.FPLoop",
		"live.CallersFPAt", "sync/atomic.(*Uintptr).Load"}
	for fn, ok := range allowed {
		asm, found := funcs[fn]
		if !found {
			t.Fatalf("no assembly for %s in the compiler's output", fn)
		}
		calls := regexp.MustCompile(`\tCALL\t(\S+)`).FindAllStringSubmatch(asm, -1)
	next:
		for _, c := range calls {
			target := c[1]
			if strings.HasPrefix(target, "runtime.morestack") || strings.HasPrefix(target, "runtime.panic") {
				continue
			}
			for _, a := range ok {
				if strings.Contains(target, a) {
					continue next
				}
			}
			t.Errorf("%s calls %s", fn, target)
		}
	}
}
