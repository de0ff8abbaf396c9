package fp_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/unwindkit/unwindkit/fp"
)

// A step that reads bytes the caller marked missing (Stack.Holes) fails
// there, naming them and wrapping the hole's error, with the frames
// before it; a hole the walk never reads changes nothing. Each of the
// records' pages missing in turn: Walk, Save and the fast path agree.
func TestHoles(t *testing.T) {
	task, x29 := buildTask()
	cfg := fp.Config{Stacks: []fp.Stack{task}, FP: x29, PC: 0xffff800080004000, TaskPtRegs: fp.TaskPtRegsAddr(task.High, fp.PtRegsLayout{})}
	all, end, err := walkAll(&cfg)
	if err != nil || end != fp.EndFinal || len(all) != 4 {
		t.Fatalf("whole stack: %x %v %v", all, end, err)
	}
	errGone := errors.New("page not in the dump")
	// The records are at x29, and upward every 32 bytes; FINAL's type
	// word in the task's pt_regs.
	final := fp.TaskPtRegsAddr(task.High, fp.PtRegsLayout{}) + fp.PtRegsStackFrameOff
	reads := []uint64{x29, x29 + 32, x29 + 64, final + fp.MetaTypeOff}
	for i, a := range reads {
		c := cfg
		c.Stacks = []fp.Stack{task}
		c.Stacks[0].Holes = []fp.Hole{{Low: a &^ 7, High: a&^7 + 8, Err: errGone}}
		got, end, err := walkAll(&c)
		want := all[:min(i+1, len(all))]
		if !errors.Is(err, errGone) || end != fp.EndError || !slices.Equal(got, want) || !strings.Contains(err.Error(), fmt.Sprintf("%#x", a&^7)) {
			t.Errorf("hole at %#x: %x %v %v, want %x and the hole's error", a, got, end, err, want)
		}
		store := make([]uint64, 16)
		n, send, serr := fp.SaveEnd(&c, store, 0)
		if !errors.Is(serr, errGone) || send != fp.EndError || !slices.Equal(store[:n], want) {
			t.Errorf("Save, hole at %#x: %x %v %v", a, store[:n], send, serr)
		}
	}
	// Below every record: never read.
	c := cfg
	c.Stacks = []fp.Stack{task}
	c.Stacks[0].Holes = []fp.Hole{{Low: task.Low, High: task.Low + 4096}}
	if got, end, err := walkAll(&c); err != nil || end != fp.EndFinal || !slices.Equal(got, all) {
		t.Errorf("unread hole: %x %v %v", got, end, err)
	}
	// A hole outside its stack is a bad Config.
	c.Stacks[0].Holes = []fp.Hole{{Low: task.High, High: task.High + 8}}
	if _, _, err := walkAll(&c); err == nil || !strings.Contains(err.Error(), "hole") {
		t.Errorf("hole outside the stack: %v", err)
	}
}

// walkAll returns the PCs of a walk of c with fp.Walk, its end and error.
func walkAll(c *fp.Config) ([]uint64, fp.End, error) {
	var pcs []uint64
	end, err := fp.Walk(c, func(f fp.Frame) bool { pcs = append(pcs, f.PC); return true })
	return pcs, end, err
}
