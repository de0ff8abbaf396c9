package depot_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/unwindkit/unwindkit/depot"
)

// TestForeignHandle checks what Handle's doc promises for a handle used
// with a depot that did not return it: the other depot rejects it with a
// *HandleError or returns one of its own traces, never a mixture and
// never a trace it does not hold.
func TestForeignHandle(t *testing.T) {
	a, err := depot.New(depot.Config{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := depot.New(depot.Config{})
	if err != nil {
		t.Fatal(err)
	}
	own := map[depot.Handle][]uint64{}
	var foreign []depot.Handle
	for i := range 200 {
		ta := []uint64{0xa000 + uint64(i), 0xa1, 0xa2}
		ha, err := a.Save(ta)
		if err != nil {
			t.Fatal(err)
		}
		foreign = append(foreign, ha)
		if i%3 == 0 { // b holds fewer traces, so some of a's handles point past its records
			tb := []uint64{0xb000 + uint64(i), 0xb1}
			hb, err := b.Save(tb)
			if err != nil {
				t.Fatal(err)
			}
			own[hb] = tb
		}
	}
	var rejected, aliased int
	for _, h := range foreign {
		got, err := b.Fetch(h, nil)
		var he *depot.HandleError
		switch {
		case errors.As(err, &he):
			rejected++
		case err != nil:
			t.Fatalf("handle %v: error %v is not a *HandleError", h, err)
		default:
			want, ok := own[h]
			if !ok || !slices.Equal(got, want) {
				t.Fatalf("handle %v of depot a fetched %#x from depot b, which is none of b's traces at that handle", h, got)
			}
			aliased++
		}
	}
	if rejected == 0 {
		t.Errorf("no foreign handle was rejected (%d aliased): b holds %d traces, a %d", aliased, len(own), len(foreign))
	}
	t.Logf("%d foreign handles rejected, %d named b's own record", rejected, aliased)
}
