package depot

import "hash/maphash"

// hashWords hashes the frames w with d's seed: the hash a map[string]
// uses, applied to the frames' bytes in one call (hash/maphash.Comparable
// of a string: the runtime's memhash, AES-based where the CPU has AES,
// without allocating; maphash.Bytes would hash in 128-byte pieces at twice
// the cost for a 32-frame trace), so a depot lookup pays no more for
// hashing than a map lookup of the same bytes. It is not a cryptographic
// hash: the depot compares every frame of a candidate before it trusts a
// match, so a collision only costs a longer probe; the seed is random per
// depot so that crafted traces cannot force long probes across runs.
func hashWords(d *Depot, w []uint64) uint64 {
	return maphash.Comparable(d.seed, bytesOf(w))
}
