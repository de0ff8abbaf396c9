package fp

import (
	"encoding/binary"
	"unsafe"

	"github.com/unwindkit/unwindkit/internal/mem"
)

// Two kinds of memory back a walk. A caller's memory is plain read-only
// bytes attached to each descriptor (Stack.Data, Config.GraphStackData,
// Config.KretprobeStackData): nothing to implement and no interface call
// per word; the walk views each stack's bytes as words (wordsOf), so the
// hot loop is the same for both kinds of memory.
// The machine model's memory is written by modelled CPUs while other
// goroutines unwind them, so it is read word by word with sync/atomic; the
// model attaches it to a Config through mem.AttachFP, which only code
// inside this module can reach, so no exported identifier of this package
// mentions an internal type.
func init() {
	mem.AttachFP = attach
}

// attach sets the model memory of the *Config cfg (see mem.AttachFP).
func attach(cfg any, m *mem.Memory) {
	cfg.(*Config).mem = m
}

// littleEndian reports whether the host stores words little-endian, as
// arm64 does (amd64 and arm64 hosts do).
var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// wordsOf returns the caller's bytes data (a multiple of 8 bytes,
// little-endian words) as words, so the walk has one hot loop for both
// kinds of memory. On a little-endian host, when data is 8-byte aligned
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
