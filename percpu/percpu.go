// Package percpu models the kernel's per-CPU variables (DEFINE_PER_CPU,
// this_cpu_ptr, per_cpu_ptr, READ_ONCE/WRITE_ONCE) for a fixed number of
// modelled CPUs.
//
// Each CPU's slot is padded so that no two CPUs' slots share a cache line
// (the kernel gets the same effect from separate per-CPU areas): a slot
// is followed by at least CacheLine bytes of padding before the next CPU's
// value begins.
//
// Var holds plain data that only the owning CPU's goroutine touches.
// Uint64 holds words that another CPU may read concurrently, such as the
// shadow call stack's per-CPU saved pointers that one CPU's unwinder reads
// while another CPU runs; every access is atomic.
//
// A CPU number outside [0, NumCPU) never aliases another CPU's slot: the
// accessors that return no error panic with a message naming the CPU and the
// range, and Lookup returns an error instead.
package percpu

import (
	"fmt"
	"sync/atomic"
)

// CacheLine is the padding, in bytes, kept between two CPUs' slots. 128
// covers the 64-byte lines of current arm64 and amd64 cores plus the
// adjacent-line prefetcher that pairs them.
const CacheLine = 128

type slot[T any] struct {
	v T
	_ [CacheLine]byte
}

// Var is a per-CPU variable of type T: one independent T per modelled CPU.
type Var[T any] struct {
	slots []slot[T]
}

// New returns a per-CPU variable for ncpu CPUs, each slot the zero T.
// It fails if ncpu is not positive.
func New[T any](ncpu int) (*Var[T], error) {
	if ncpu <= 0 {
		return nil, fmt.Errorf("percpu: %d CPUs: need at least one", ncpu)
	}
	return &Var[T]{slots: make([]slot[T], ncpu)}, nil
}

// NumCPU returns the number of CPUs v was created for.
func (v *Var[T]) NumCPU() int { return len(v.slots) }

// Ptr returns CPU cpu's slot (per_cpu_ptr). Access through it is plain, for
// the owning CPU's goroutine. Ptr panics if cpu is out of range.
func (v *Var[T]) Ptr(cpu int) *T {
	if uint(cpu) >= uint(len(v.slots)) {
		panic(rangeError(cpu, len(v.slots)))
	}
	return &v.slots[cpu].v
}

// Lookup is Ptr with an error instead of a panic for an out-of-range cpu.
func (v *Var[T]) Lookup(cpu int) (*T, error) {
	if uint(cpu) >= uint(len(v.slots)) {
		return nil, rangeError(cpu, len(v.slots))
	}
	return &v.slots[cpu].v, nil
}

type u64slot struct {
	v atomic.Uint64
	_ [CacheLine]byte
}

// Uint64 is a per-CPU 64-bit word whose every access is atomic, so one CPU
// may read another's value while it is being written (READ_ONCE and
// WRITE_ONCE in the kernel).
type Uint64 struct {
	slots []u64slot
}

// NewUint64 returns a per-CPU word for ncpu CPUs, all zero.
func NewUint64(ncpu int) (*Uint64, error) {
	if ncpu <= 0 {
		return nil, fmt.Errorf("percpu: %d CPUs: need at least one", ncpu)
	}
	return &Uint64{slots: make([]u64slot, ncpu)}, nil
}

// NumCPU returns the number of CPUs u was created for.
func (u *Uint64) NumCPU() int { return len(u.slots) }

func (u *Uint64) at(cpu int) *atomic.Uint64 {
	if uint(cpu) >= uint(len(u.slots)) {
		panic(rangeError(cpu, len(u.slots)))
	}
	return &u.slots[cpu].v
}

// Load returns CPU cpu's value (READ_ONCE). It panics if cpu is out of range.
func (u *Uint64) Load(cpu int) uint64 { return u.at(cpu).Load() }

// Store sets CPU cpu's value (WRITE_ONCE). It panics if cpu is out of range.
func (u *Uint64) Store(cpu int, val uint64) { u.at(cpu).Store(val) }

// Swap sets CPU cpu's value and returns the old one.
func (u *Uint64) Swap(cpu int, val uint64) uint64 { return u.at(cpu).Swap(val) }

// TryLoad is Load with an error instead of a panic for an out-of-range cpu.
func (u *Uint64) TryLoad(cpu int) (uint64, error) {
	if uint(cpu) >= uint(len(u.slots)) {
		return 0, rangeError(cpu, len(u.slots))
	}
	return u.slots[cpu].v.Load(), nil
}

// RangeError reports a CPU number outside [0, NumCPU).
type RangeError struct {
	CPU, NumCPU int
}

// Error implements error.
func (e *RangeError) Error() string {
	return fmt.Sprintf("percpu: cpu %d out of range [0, %d)", e.CPU, e.NumCPU)
}

func rangeError(cpu, n int) *RangeError { return &RangeError{CPU: cpu, NumCPU: n} }
