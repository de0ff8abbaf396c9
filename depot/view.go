package depot

import (
	"sync/atomic"
	"unsafe"

	"github.com/unwindkit/unwindkit/internal/depotview"
)

// A pool pointer is one word and a hit counter one uint64, as
// depotview.Layout reads them.
var (
	_ = [1]struct{}{}[unsafe.Sizeof(atomic.Pointer[pool]{})-unsafe.Sizeof(uintptr(0))]
	_ = [1]struct{}{}[unsafe.Sizeof(atomic.Uint64{})-8]
)

func init() {
	depotview.Of = func(v any) depotview.Layout {
		d := v.(*Depot)
		d.table()
		l := depotview.Layout{
			Pools:        unsafe.Pointer(unsafe.SliceData(d.pools)),
			PoolBits:     d.poolBits,
			PoolMask:     uintptr(d.poolMask),
			UnitMask:     1<<offsetBits - 1,
			UnitBytes:    slotWords * 8,
			FramesOffset: hdrWords * 8,
		}
		if d.countHits {
			l.Hits = unsafe.Pointer(&d.hits[0].n)
			l.HitShardBits = hitShardBits
			l.HitStride = unsafe.Sizeof(d.hits[0])
		}
		return l
	}
}
