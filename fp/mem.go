package fp

import (
	"encoding/binary"
	"sync/atomic"
	"unsafe"
)

// A walk's memory is plain read-only bytes attached to each descriptor
// (Stack.Data, Config.GraphStackData, Config.KretprobeStackData): nothing
// to implement and no interface call per word. The walk views each
// stack's bytes as words (wordsOf) and reads them with atomic loads, so
// memory that another goroutine writes word by word with sync/atomic
// (unwindkit's machine model hands fp views of its own words) is read as
// READ_ONCE reads it.

// littleEndian reports whether the host stores words little-endian, as
// arm64 does (amd64 and arm64 hosts do).
var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// wordsOf returns the caller's bytes data (a multiple of 8 bytes,
// little-endian words) as words, so the walk has one hot loop for every
// kind of memory. On a little-endian host, when data is 8-byte aligned
// (any make([]byte) is, and so is every slice of it at a multiple of 8),
// the words are a view of data itself: no copy, and the walk's atomic
// loads are plain loads of the caller's memory on amd64. Otherwise (an
// unaligned slice, a big-endian host) the stack is decoded into a copy
// once, when the walk first enters it.
func wordsOf(data []byte) []uint64 {
	n := len(data) / 8
	if n == 0 {
		return nil
	}
	p := unsafe.Pointer(unsafe.SliceData(data))
	if littleEndian && uintptr(p)%8 == 0 {
		return unsafe.Slice((*uint64)(p), n)
	}
	w := make([]uint64, n)
	for i := range w {
		w[i] = binary.LittleEndian.Uint64(data[8*i:])
	}
	return w
}

// loadLE returns the little-endian word at data[off:off+8], with an
// atomic load when it is an aligned word on a little-endian host (as
// wordsOf's views are read).
func loadLE(data []byte, off uint64) uint64 {
	p := unsafe.Pointer(&data[off])
	if littleEndian && uintptr(p)%8 == 0 {
		return atomic.LoadUint64((*uint64)(p))
	}
	return binary.LittleEndian.Uint64(data[off:])
}
