package depotview

import (
	"unsafe"

	"github.com/unwindkit/unwindkit/internal/tracehash"
)

// Rolls are the counters behind the chances a guesser takes when it moves
// a hint (package depot's hints, internal/live's): one counter per shard
// of goroutines, each alone on its cache line.
type Rolls [1 << rollShardBits]struct {
	n uint64
	_ [56]byte
}

// rollShardBits is log2 of the counters' shards.
const rollShardBits = 4

// Roll returns a number for a chance: the mixed count of the calling
// goroutine's shard's counter, one more each roll. The counter is read and
// written without atomics, in a function the race detector does not see:
// two goroutines that share a shard may lose a count, which only repeats
// a roll. A shared random source would cost a call chain and 13 ns a save
// (math/rand/v2, measured on internal/live's 40-frame stacks), an atomic
// add a locked instruction.
//
//go:norace
func (r *Rolls) Roll() uint64 {
	var x byte
	c := &r[Shard(uintptr(unsafe.Pointer(&x)), rollShardBits)]
	c.n++
	return tracehash.Finish(c.n, 0)
}
