// Package depot is a deduplicating store of stack traces with compact
// 32-bit handles, modelled on the Linux kernel's stack depot
// (lib/stackdepot.c, include/linux/stackdepot.h) and on the Go runtime's
// trace stack table (runtime/tracemap.go) and profile bucket hash
// (runtime/mprof.go).
//
// [Depot.Save] stores a trace once and returns a [Handle]; saving the same
// frames again returns the same Handle, and two different traces never share
// one: a match needs equal hash tags, equal lengths and equal frames.
// [Depot.Fetch] gives the frames back, appended to a caller's slice so that
// the hot path does not allocate. The zero Depot is ready to use with the
// default [Config]; [New] makes one with another configuration.
//
// # Records and pools
//
// Records live in pools of [PoolSize] bytes, allocated on demand up to
// [Config.MaxPools] (the memory limit). The first 512 bytes of a pool are a
// bitmap with one bit per 16-byte unit, set at the first unit of every
// record, so that a forged handle pointing into the middle of a record is
// refused. A record is two header words (the trace's hash and length; its
// state) followed by its frames, rounded up to 16 bytes: a persistent
// trace of n frames costs 8*n + 16 bytes (n even) or 8*n + 24 (n odd). The
// hash table is open-addressed with linear probing: one 4-byte entry per
// slot holding a record's location and 5 bits of its hash, so that a
// lookup passes over the entries of other traces without reading their
// records. It starts at 1,024 slots and is rebuilt, twice as large when
// needed, whenever more than 13/16 of its slots are in use, so it costs
// 4.9 to 9.8 bytes per stored trace, whatever the memory limit. Measured
// on the real heap ([runtime.MemStats], 100,000 distinct persistent traces
// of 32 frames): about 280 bytes per trace at the default configuration
// and 283 at [MaxPoolsLimit] (whose pool directory takes 256 KiB), against
// 256 bytes of frames. The default configuration (32 MiB) holds 122,368
// such traces.
//
// When the limit is reached Save returns an error wrapping [ErrNoSpace] and
// the depot is unchanged, as the kernel's stack_depot_save_flags fails
// without STACK_DEPOT_FLAG_CAN_ALLOC.
//
// # Persistent and refcounted records
//
// Save creates persistent records, which are never evicted (the kernel's
// default). [Depot.SaveFlags] with [FlagGet] creates or references a
// refcounted record (STACK_DEPOT_FLAG_GET): [Depot.Get] adds a reference,
// [Depot.Put] drops one, and the Put that drops the last reference evicts
// the record to a freelist. The rules for persistent records:
//
//   - a plain Save that finds a refcounted record makes it persistent
//     ("pins" it), so that a handle returned by Save stays valid for the
//     life of the depot;
//   - a refcounted record whose count would pass [MaxRefs] is pinned too
//     (the kernel's refcount_t saturates and leaks the same way);
//   - Get, Put and SaveFlags(FlagGet) on a persistent record change nothing.
//
// [Stats.Pinned] counts the pins.
//
// Freed space serves any later trace: as in the kernel's depot_alloc_stack
// ("evictable entries have to allocate the max. size so they may safely be
// re-used by differently sized allocations"), every refcounted record
// takes the space of a [Config.MaxFrames] trace,
// 8*MaxFrames + 16 bytes (528 bytes at the default of 64 frames, whatever
// its length), and a freed record is reused oldest first by the next
// record of any length, refcounted or, when no new pool can be had,
// persistent. That is the memory cost of reusable space: a depot that keeps
// mostly short refcounted traces should lower MaxFrames to the longest
// trace it keeps (with MaxFrames 32, a 32-frame refcounted trace costs the
// same 272 bytes as a persistent one). So the default configuration holds
// 62,976 refcounted traces, whatever their length, not the 100,000
// 32-frame ones that would fit at their own size; with MaxFrames 32 it
// holds 122,368, as many as persistent ones.
//
// # Handles
//
// A Handle is 32 bits, like the kernel's union handle_parts, low bits first:
// P pool bits, 12 offset bits (16-byte units within a pool) and G = 20 - P
// generation bits, where P = ceil(log2(MaxPools)) follows from the
// configuration: P = 9 and G = 11 at the default of 512 pools, P = 15 and
// G = 5 at [MaxPoolsLimit], P = 0 and G = 20 with one pool. Handle 0 is
// never valid (offset 0 of a pool is its bitmap).
//
// Each record slot keeps a 40-bit sequence number in its state word that
// grows by one every time the slot is evicted; a handle carries its low G
// bits. The handle of an evicted record is therefore stale, and Fetch, Get,
// Put and Len reject it with an error wrapping [ErrBadHandle], until its
// slot has been reused 2^G times: 2,047 reuses are always rejected at the
// default configuration, 31 at MaxPoolsLimit, 1,048,575 with one pool.
// Freed slots are reused oldest first, so one slot is reused only after
// every other freed slot. Forged handles (a pool that does not exist, an
// offset that is not the start of a record) are rejected without reading
// outside the depot.
//
// # Concurrency
//
// A Depot is safe for concurrent use. Looking up a trace that is already
// stored (a Save hit), Fetch, Get and a Put that does not drop the last
// reference take no lock. Records are published with atomic stores, and the
// lock-free paths validate what they read against the slot's state word:
//
//   - a persistent record is never evicted, so a reader that has seen it
//     persistent reads stable frames;
//   - a refcounted record is only ever returned by a compare-and-swap on the
//     full state word (taking the reference), and Fetch re-reads the state
//     after copying. Both compare the full 40-bit sequence, not the handle's
//     G bits, so a reader that pauses while its slot is evicted and reused
//     sees a changed state and falls back to the lock (or reports the handle
//     stale), however many reuses came round the handle's generation. Only
//     2^40 reuses of one slot during one pause could fool it: at the
//     fastest evict-and-reuse cycle (tens of nanoseconds, under the lock)
//     that is a pause of hours.
//
// Inserts, evictions and rebuilds of the hash table take a mutex. A reader
// that probes a table being rebuilt or rewritten may miss a stored trace;
// it then looks again under the mutex, so a miss is never reported
// wrongly. An evicted record's entry becomes a tombstone that probes pass
// over (or an empty slot when nothing follows it), and rebuilds drop them.
//
// # Hashing, and producers that hash
//
// A trace's hash is the depot's own ([HashKey]: seeded per depot, one
// multiply, shift, rotate and two xors a frame), so that a producer can
// compute it while it makes the trace: an unwinder that hashes each return
// address as it stores it hands the result to [Depot.SaveHashed] (or
// [Depot.LookupHashed]), and a hit then costs the table probe and one
// compare of the candidate's frames, without reading the trace to hash
// it. Save hashes the trace itself with the same function, four frames a
// step, so both paths give the same handle. A miss checks the producer's
// hash against the trace before storing it ([ErrHash]).
//
// # Hints
//
// Save, SaveFlags and SavePCs, which have the whole trace in hand, first
// look for it without hashing it: a key of a sample of its frames (the
// first 12, the middle one, the last two, and its length) picks a set of
// the depot's hint table (8,192 one-word slots, 64 KiB, [Stats.HintBytes],
// allocated by the first plain save: a depot saved only with a producer's
// hash has none), whose slots name persistent records saved before. The
// trace is
// compared with the record of its tag, the compare a hit makes anyway,
// and only a trace not found that way is hashed and looked up. Only
// persistent records are hints, so a hint never names a record that
// changed; a set keeps at most one slot of a tag, so traces that share a
// key (they differ only in frames the key does not read, as a deep
// recursion's may) compare at most one other record a save.
//
// Colliding traces are bounded: a lookup compares at most 4 records whose
// 64-bit key equals its own; a trace beyond the 4th with the same key is
// stored under a second, independent hash (the runtime's memhash under a
// seed of its own), which a lookup computes only after meeting those 4.
// So a trace set built to collide costs each lookup at most 4 extra record
// compares and one more hash of its bytes, never a probe through the set
// (TestCollidingTraces forces every trace of a length to collide).
//
// # Speed
//
// A Save hit found by its hint keys the trace, reads one slot set and one
// record and compares every frame; one that is not hashes the trace
// once, probes the table, reads one record and compares every frame
// (SaveHashed does that with the producer's hash). With hit counting on
// (Config.CountHits) either adds one atomic add, to a
// counter shard that stays with the goroutine (picked from its stack
// address), so that goroutines counting hits do not pass one cache line
// between their cores. It takes no lock and writes nothing shared, so
// goroutines hitting different traces do not wait for each other.
// Hashing (where there is no hint) and comparing are most of its cost.
// See the README's tables: BenchmarkSaveHit,
// BenchmarkSaveMiss, BenchmarkFetch and BenchmarkCompare (interleaved
// blocks, ratios from the same run) measure the depot, a mutex-guarded map
// and a sync.Map side by side; BenchmarkCompare's producer row is
// SaveHashed given each trace's hash, and its floors show where the time
// goes: the hash alone (this depot's, and the runtime's memhash for
// reference), the unsynchronised map, the depot's hit given the hash, and
// its fetch with no handle check (the copy needs the frame count, which
// the depot reads from the record and the map from its slice header).
package depot
