package fp

import (
	"errors"
	"slices"
	"testing"

	"github.com/unwindkit/unwindkit/ptrauth"
)

const (
	graphTramp = text + 0xf000 // return_to_handler
	krTramp    = text + 0xf100 // __kretprobe_trampoline
	graphAddr  = 0x40000000    // the task's graph return stack
	krAddr     = 0x40100000    // the task's kretprobe instances
)

// tracedChain builds a task chain of depth records; lrs[i] replaces the
// lr of record i+1 (record 1 is the outermost) when non-zero. It returns
// the machine, the stack, the record addresses (index i = record i+1) and
// the caller-fp of each record (its fp field).
func tracedChain(t *testing.T, depth int, lrs map[int]uint64) (*machine, *tstack, []uint64, []uint64) {
	m := newMachine(t)
	s := m.taskStack("task", stackTop, TaskStackSize)
	var recs, fps []uint64
	for i := 1; i <= depth; i++ {
		lr := pc(i)
		if v, ok := lrs[i]; ok {
			lr = v
		}
		fps = append(fps, s.fp)
		recs = append(recs, s.call(lr))
	}
	return m, s, recs, fps
}

func TestGraphRecovery(t *testing.T) {
	// Functions entered through records 2 and 4 are traced: their saved lr
	// is return_to_handler, and the ret_stack holds the real ones, keyed by
	// the fp in the same record (the caller's x29).
	m, s, _, fps := tracedChain(t, 5, map[int]uint64{2: graphTramp, 4: graphTramp})
	c := m.config(s, pc(0))
	c.GraphTrampoline = graphTramp
	c.GraphStack, c.GraphStackData = m.retStack("graph", graphAddr,
		[2]uint64{pc(2), fps[1]},
		[2]uint64{graphTramp, fps[3]}, // a tail call's entry: skipped
		[2]uint64{pc(4), fps[3]},
	)
	frames, end, err := walkAll(t, c)
	if err != nil || end != EndFinal {
		t.Fatalf("end %v err %v", end, err)
	}
	want := []uint64{pc(0), pc(5), pc(4), pc(3), pc(2), pc(1)}
	if !slices.Equal(pcs(frames), want) {
		t.Fatalf("pcs %x, want %x", pcs(frames), want)
	}
	for i, f := range frames {
		recovered := i == 2 || i == 4
		if (f.Flags == FlagGraph) != recovered || (f.Raw == graphTramp) != recovered {
			t.Errorf("frame %d: %+v", i, f)
		}
	}
	// Reliable mode accepts recovered addresses.
	c.Reliable = true
	if _, end, err := walkAll(t, c); end != EndFinal || err != nil {
		t.Fatalf("reliable: %v %v", end, err)
	}
}

func TestGraphRecoveryFailures(t *testing.T) {
	tests := []struct {
		name     string
		entries  [][2]uint64
		noStack  bool
		reliable bool
		wantPCs  int // frames before the failure
		wantErr  error
	}{
		{"fp mismatch", [][2]uint64{{pc(2), 0x1234}}, false, false, 3, ErrCorrupt},
		{"empty ret stack", nil, false, false, 3, ErrCorrupt},
		{"only trampoline entries", [][2]uint64{{graphTramp, 0}}, false, false, 3, ErrCorrupt},
		{"no ret stack", nil, true, false, 5, nil}, // kernel: lr left as the trampoline
		{"no ret stack reliable", nil, true, true, 3, ErrUnreliable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, s, _, fps := tracedChain(t, 4, map[int]uint64{2: graphTramp})
			c := m.config(s, pc(0))
			c.GraphTrampoline = graphTramp
			c.Reliable = tt.reliable
			if !tt.noStack {
				for i := range tt.entries {
					if tt.entries[i][1] == 0 {
						tt.entries[i][1] = fps[1]
					}
				}
				c.GraphStack, c.GraphStackData = m.retStack("graph", graphAddr, tt.entries...)
			}
			frames, _, err := walkAll(t, c)
			if len(frames) != tt.wantPCs || !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Fatalf("%d frames %x err %v", len(frames), pcs(frames), err)
			}
			if tt.wantErr == ErrCorrupt {
				wantCorrupt(t, err, "unrecoverable graph return", fps[1])
			}
			if tt.noStack && !tt.reliable && frames[3].PC != graphTramp {
				t.Fatalf("trampoline not left in place: %x", pcs(frames))
			}
		})
	}
	// A corrupt entry count cannot make the search run away.
	m, s, _, _ := tracedChain(t, 4, map[int]uint64{2: graphTramp})
	c := m.config(s, pc(0))
	c.GraphTrampoline = graphTramp
	c.GraphStack, c.GraphStackData = m.retStack("graph", graphAddr, [2]uint64{pc(2), 1})
	m.mem.Store(graphAddr, 1<<62)
	if _, _, err := walkAll(t, c); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("huge count: %v", err)
	}
	c.GraphStack, c.GraphStackData = 0x12345, nil // unmapped
	if _, _, err := walkAll(t, c); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("unmapped ret stack: %v", err)
	}
}

// The cursor moves outward: two traced frames with the same caller fp (a
// recursion that cannot happen with strictly increasing fps is not
// needed; instead two entries for different fps) are each used once, and
// a stale newer entry whose fp no longer appears is passed over.
func TestGraphCursor(t *testing.T) {
	m, s, _, fps := tracedChain(t, 4, map[int]uint64{1: graphTramp, 3: graphTramp})
	c := m.config(s, pc(0))
	c.GraphTrampoline = graphTramp
	c.GraphStack, c.GraphStackData = m.retStack("graph", graphAddr,
		[2]uint64{pc(1), fps[0]},
		[2]uint64{pc(3), fps[2]},
		[2]uint64{0xdead, 0x9999}, // newest, matches nothing on the stack
	)
	frames, end, err := walkAll(t, c)
	if err != nil || end != EndFinal || !slices.Equal(pcs(frames), []uint64{pc(0), pc(4), pc(3), pc(2), pc(1)}) {
		t.Fatalf("%v %v %x", end, err, pcs(frames))
	}
	// Entries older than the cursor only: the outer frame's entry is newer
	// than the inner one's, so after the inner match it is out of reach.
	c.GraphStack, c.GraphStackData = m.retStack("graph2", graphAddr+0x10000,
		[2]uint64{pc(3), fps[2]},
		[2]uint64{pc(1), fps[0]},
	)
	frames, _, err = walkAll(t, c)
	if !errors.Is(err, ErrCorrupt) || len(frames) != 4 {
		t.Fatalf("out-of-order entries: %x %v", pcs(frames), err)
	}
}

func TestKretprobeRecovery(t *testing.T) {
	m, s, _, fps := tracedChain(t, 5, map[int]uint64{1: krTramp, 4: krTramp})
	c := m.config(s, pc(0))
	c.KretprobeTrampoline = krTramp
	c.KretprobeStack, c.KretprobeStackData = m.retStack("kretprobe", krAddr,
		[2]uint64{pc(1), fps[0]},
		[2]uint64{pc(77), 0x5555}, // an instance passed over by the cursor
		[2]uint64{krTramp, fps[3]},
		[2]uint64{pc(4), fps[3]},
	)
	frames, end, err := walkAll(t, c)
	if err != nil || end != EndFinal || !slices.Equal(pcs(frames), []uint64{pc(0), pc(5), pc(4), pc(3), pc(2), pc(1)}) {
		t.Fatalf("%v %v %x", end, err, pcs(frames))
	}
	if frames[2].Flags != FlagKretprobe || frames[5].Flags != FlagKretprobe || frames[3].Flags != 0 {
		t.Fatalf("flags %+v", frames)
	}
	// Negative: no matching instance, and no instances at all.
	c.KretprobeStack, c.KretprobeStackData = m.retStack("kretprobe2", krAddr+0x10000, [2]uint64{pc(4), fps[3]})
	frames, _, err = walkAll(t, c)
	if len(frames) != 5 {
		t.Fatalf("missing instance: %x", pcs(frames))
	}
	wantCorrupt(t, err, "unrecoverable kretprobe return", fps[0])
	c.KretprobeStack, c.KretprobeStackData = 0, nil
	frames, _, err = walkAll(t, c)
	if len(frames) != 2 {
		t.Fatalf("no instances: %x", pcs(frames))
	}
	wantCorrupt(t, err, "unrecoverable kretprobe return", fps[3])
}

func TestGraphAndKretprobe(t *testing.T) {
	// Record 2: graph only. Record 3: kretprobe only. Record 4: both: the
	// graph tracer hooked the return after the kretprobe did, so the
	// graph entry's ret is the kretprobe trampoline, recovered second.
	m, s, _, fps := tracedChain(t, 5, map[int]uint64{2: graphTramp, 3: krTramp, 4: graphTramp})
	c := m.config(s, pc(0))
	c.GraphTrampoline, c.KretprobeTrampoline = graphTramp, krTramp
	c.GraphStack, c.GraphStackData = m.retStack("graph", graphAddr, [2]uint64{pc(2), fps[1]}, [2]uint64{krTramp, fps[3]})
	c.KretprobeStack, c.KretprobeStackData = m.retStack("kretprobe", krAddr, [2]uint64{pc(3), fps[2]}, [2]uint64{pc(4), fps[3]})
	frames, end, err := walkAll(t, c)
	if err != nil || end != EndFinal || !slices.Equal(pcs(frames), []uint64{pc(0), pc(5), pc(4), pc(3), pc(2), pc(1)}) {
		t.Fatalf("%v %v %x", end, err, pcs(frames))
	}
	wantFlags := []Flags{0, 0, FlagGraph | FlagKretprobe, FlagKretprobe, FlagGraph, 0}
	for i, f := range frames {
		if f.Flags != wantFlags[i] {
			t.Errorf("frame %d flags %b, want %b", i, f.Flags, wantFlags[i])
		}
	}
	// The start PC is recovered too (do_kunwind's first recovery).
	c2 := m.config(s, graphTramp)
	c2.GraphTrampoline = graphTramp
	c2.GraphStack, c2.GraphStackData = m.retStack("graph start", graphAddr+0x20000, [2]uint64{pc(2), fps[1]}, [2]uint64{pc(40), s.fp})
	frames, _, _ = walkAll(t, c2)
	if frames[0].PC != pc(40) || frames[0].Flags != FlagGraph {
		t.Fatalf("start frame %+v", frames[0])
	}
}

// PAC-signed return addresses are stripped before recovery, in the
// kernel's order: a signed trampoline is still recognised.
func TestPACSignedLRs(t *testing.T) {
	layout := ptrauth.NewLayout(48, false)
	key := ptrauth.Key{Hi: 0x0123456789abcdef, Lo: 0xfedcba9876543210}
	m := newMachine(t)
	s := m.taskStack("task", stackTop, TaskStackSize)
	var fps []uint64
	lrs := []uint64{pc(1), pc(2), graphTramp, pc(4)}
	for _, lr := range lrs {
		// paciasp signs x30 with sp (the frame's top, here fp+32) as the
		// modifier.
		fps = append(fps, s.fp)
		signed := layout.Sign(lr, s.sp, key, ptrauth.QARMA5)
		if signed == lr {
			t.Fatalf("Sign left %#x unchanged", lr)
		}
		s.call(signed)
	}
	base := m.config(s, layout.Sign(pc(0), 0x1000, key, ptrauth.QARMA5))
	base.GraphTrampoline = graphTramp
	base.GraphStack, base.GraphStackData = m.retStack("graph", graphAddr, [2]uint64{pc(3), fps[2]})
	want := []uint64{pc(0), pc(4), pc(3), pc(2), pc(1)}
	for _, tt := range []struct {
		name   string
		layout ptrauth.Layout
		ok     bool
	}{{"stripped", layout, true}, {"no PAC layout", ptrauth.Layout{}, false}} {
		c := *base
		c.Layout = tt.layout
		frames, end, err := walkAll(t, &c)
		if err != nil || end != EndFinal {
			t.Fatalf("%s: %v %v", tt.name, end, err)
		}
		if got := pcs(frames); slices.Equal(got, want) != tt.ok {
			t.Fatalf("%s: pcs %x (want match %v with %x)", tt.name, got, tt.ok, want)
		}
		for _, f := range frames[1:] {
			// Raw keeps the PAC; PC is the stripped (and recovered) value.
			if tt.ok && (f.Raw == f.PC || (f.Flags == 0 && layout.Strip(f.Raw) != f.PC)) {
				t.Fatalf("%s: raw %#x pc %#x", tt.name, f.Raw, f.PC)
			}
		}
		store := make([]uint64, 8)
		n, _ := Save(&c, store, 0)
		if slices.Equal(store[:n], want) != tt.ok {
			t.Fatalf("%s: Save %x", tt.name, store[:n])
		}
	}
}
