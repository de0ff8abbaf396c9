package kernel

import (
	"slices"
	"testing"

	"github.com/unwindkit/unwindkit/unwind"
	"github.com/unwindkit/unwindkit/unwind/vmcore"
)

// TestProcStack checks the rules of /proc/PID/stack's lines on
// synthetic symbols: the scheduler's and the locks' text left out, %pB
// naming a return address at the very end of a function (a noreturn
// call) by the function it returns into, a module's "[mod]", and the
// 64-entry bound; and that without the section bounds it refuses.
func TestProcStack(t *testing.T) {
	syms := []vmcore.KSym{
		// At one address the function comes first, then the section
		// markers, as Debian's /proc/kallsyms lists them (__switch_to,
		// __sched_text_start); the first is the name printed.
		{Name: "__schedule", Addr: 0x1000, Type: 't'}, {Name: "__sched_text_start", Addr: 0x1000, Type: 'T'},
		{Name: "_raw_spin_lock", Addr: 0x1100, Type: 'T'}, {Name: "__sched_text_end", Addr: 0x1100, Type: 'T'},
		{Name: "__lock_text_start", Addr: 0x1100, Type: 'T'},
		{Name: "do_exit", Addr: 0x1200, Type: 'T'}, {Name: "__lock_text_end", Addr: 0x1200, Type: 'T'},
		{Name: "next_fn", Addr: 0x1300, Type: 'T'}, {Name: "end", Addr: 0x1400, Type: 'T'},
		{Name: "mod_read", Addr: 0x8000, Type: 't', Module: "tun"}, {Name: "mod_end", Addr: 0x8080, Type: 't', Module: "tun"},
	}
	vmcore.SortSizes(syms)
	k := &Kernel{V: &vmcore.Vmcore{Path: "synthetic"}, Syms: syms, sym: map[string]uint64{}}
	for _, s := range syms {
		if _, ok := k.sym[s.Name]; !ok {
			k.sym[s.Name] = s.Addr
		}
	}
	fs := []unwind.Frame{{PC: 0x1040}, {PC: 0x1140}, {PC: 0x1300}, {PC: 0x8010}, {PC: 0x1210}}
	got, err := k.ProcStack(fs)
	want := []string{"[<0>] do_exit+0x100/0x100", "[<0>] mod_read+0x10/0x80 [tun]", "[<0>] do_exit+0x10/0x100"}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("ProcStack %q, %v; want %q", got, err, want)
	}
	if f := k.Format(0x1300); f != "next_fn+0x0/0x100" {
		t.Errorf("Format at a function's start: %s", f)
	}
	many := make([]unwind.Frame, 100)
	for i := range many {
		many[i].PC = 0x1210
	}
	if got, _ := k.ProcStack(many); len(got) != ProcStackDepth {
		t.Errorf("%d lines of 100 frames, want %d", len(got), ProcStackDepth)
	}
	delete(k.sym, "__lock_text_end")
	if _, err := k.ProcStack(fs); err == nil {
		t.Errorf("ProcStack without the lock text's end: no error")
	}
}
