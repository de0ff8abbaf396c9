package machine

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/unwindkit/unwindkit/unwind"
)

// TestConcurrentUnwind drives CPU 0 through calls, returns, IRQs and SDEI
// events on one goroutine while three others unwind it with both methods.
// The driver records, for every state (by sequence number), what each
// unwinder must return; every concurrent result must equal the record of
// the state it read, or be ErrChanged.
func TestConcurrentUnwind(t *testing.T) {
	for _, pol := range []Policy{ThreadInfo, PerCPU, OnStack} {
		t.Run(pol.String(), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Policy, cfg.PAC, cfg.KeepInterruptedPC, cfg.FGraph = pol, true, true, true
			cfg.Funcs = testFuncs()
			s := newScript(t, cfg)
			c := s.m.CPU(0)

			type rec struct {
				pcs [2][]uint64
				err [2]error
			}
			var mu sync.Mutex
			records := map[uint64]rec{}
			record := func() {
				var r rec
				for i, method := range []unwind.Method{unwind.MethodSCS, unwind.MethodFP} {
					x := c.Expect(method, SaveOptions{})
					r.pcs[i], r.err[i] = x.PCs, x.Err
				}
				mu.Lock()
				records[c.Seq()] = r
				mu.Unlock()
			}
			record()

			var done atomic.Bool
			var checked, busy atomic.Int64
			var wg sync.WaitGroup
			errc := make(chan error, 8)
			for g := 0; g < 3; g++ {
				wg.Add(1)
				go func(g int) {
					defer wg.Done()
					store := make([]uint64, 600)
					for i := 0; !done.Load(); i++ {
						k := (g + i) % 2
						method := []unwind.Method{unwind.MethodSCS, unwind.MethodFP}[k]
						n, seq, err := c.UnwindSeq(method, store, SaveOptions{})
						if errors.Is(err, ErrChanged) {
							busy.Add(1)
							continue
						}
						mu.Lock()
						r, ok := records[seq]
						mu.Unlock()
						if !ok {
							// The driver records right after each change;
							// this state's record may not be in yet.
							continue
						}
						if !slices.Equal(store[:n], r.pcs[k]) || !errors.Is(err, r.err[k]) || (err == nil) != (r.err[k] == nil) {
							errc <- fmt.Errorf("%v at seq %d: got %s (%v), want %s (%v)", method, seq,
								s.m.names(store[:n]), err, s.m.names(r.pcs[k]), r.err[k])
							return
						}
						checked.Add(1)
					}
				}(g)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			steps := 3000
			if testing.Short() {
				steps = 800
			}
			for i := 0; i < steps; i++ {
				var err error
				switch op := rng.IntN(20); {
				case op < 9:
					err = c.Call(cfg.Funcs[rng.IntN(len(cfg.Funcs))].Name)
				case op < 15:
					err = c.Return()
				case op == 15:
					err = c.EnterIRQ()
				case op == 16:
					err = c.ExitIRQ()
				case op == 17:
					err = c.EnterSDEI(rng.IntN(2) == 0)
				default:
					err = c.ExitSDEI()
				}
				_ = err // misuse is fine; the state is then unchanged
				record()
			}
			done.Store(true)
			wg.Wait()
			close(errc)
			for err := range errc {
				t.Fatal(err)
			}
			if checked.Load() == 0 {
				t.Fatal("no concurrent unwind was checked")
			}
			t.Logf("%d concurrent unwinds checked exactly, %d busy", checked.Load(), busy.Load())
		})
	}
}
