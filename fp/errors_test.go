package fp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/unwindkit/unwindkit/fault"
	"github.com/unwindkit/unwindkit/internal/errs"
)

// A *CorruptError matches the walk's corruption errors with the rule as an
// exported constant, wrapped or not, and the corruption errors of other
// packages too; it keeps the shared wording and ErrCorrupt.
func TestCorruptErrorAs(t *testing.T) {
	m, s, _ := taskChain(t, 3)
	m.mem.Store(s.fp, s.fp-16) // the innermost record points below itself
	_, _, err := walkAll(t, m.config(s, pc(0)))
	var ce *CorruptError
	if !errors.As(fmt.Errorf("wrapped: %w", err), &ce) || ce.Rule != RuleFPNotIncreasing || ce.Addr != s.fp-16 {
		t.Fatalf("As: %v -> %+v", err, ce)
	}
	if ce.Error() != err.Error() || !errors.Is(ce, ErrCorrupt) {
		t.Fatalf("public error %q (is ErrCorrupt %v), walk error %q", ce.Error(), errors.Is(ce, ErrCorrupt), err.Error())
	}
	other := errs.Corruptf(fault.RuleSCSOverflow, 0x1230, "push on cpu %d", 1)
	if !errors.As(other, &ce) || ce.Rule != "scs overflow" || ce.Addr != 0x1230 || ce.Detail != "push on cpu 1" {
		t.Fatalf("As from another package's error: %+v", ce)
	}
	if errors.As(errors.New("x"), &ce) || errors.As(ErrUnreliable, &ce) {
		t.Fatal("As matched an error that is no corruption")
	}
}

// wordsOf views aligned caller bytes in place and decodes unaligned ones
// into a copy; both give the little-endian words.
func TestWordsOf(t *testing.T) {
	buf := make([]byte, 33)
	for i := range buf {
		buf[i] = byte(i + 1)
	}
	for _, off := range []int{0, 1} {
		data := buf[off : off+32]
		w := wordsOf(data)
		if len(w) != 4 || w[1] != binary.LittleEndian.Uint64(data[8:]) || w[3] != binary.LittleEndian.Uint64(data[24:]) {
			t.Fatalf("offset %d: %x", off, w)
		}
		data[8]++ // a view sees the change, a copy does not
		if view := w[1] == binary.LittleEndian.Uint64(data[8:]); view != (off == 0 && littleEndian) {
			t.Fatalf("offset %d: view %v", off, view)
		}
	}
}

// One Config over caller bytes drives concurrent walks (run under -race):
// the walk only reads the bytes, and every walk gives the same trace.
func TestConcurrentWalksBytes(t *testing.T) {
	m, _, irq := irqOnTask(t)
	d := dataConfig(m.config(irq, pc(0)))
	want := make([]uint64, 16)
	n, end, err := SaveEnd(d, want, 0)
	if n != 8 || end != EndFinal || err != nil {
		t.Fatalf("%d %v %v", n, end, err)
	}
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			store := make([]uint64, 16)
			for range 500 {
				if k, e, err := SaveEnd(d, store, 0); k != n || e != EndFinal || err != nil || !slices.Equal(store[:k], want[:n]) {
					t.Errorf("%d %v %v %x", k, e, err, store[:k])
					return
				}
			}
		}()
	}
	wg.Wait()
}
