package snapshot

// GCSRegion returns the captured Guarded Control Stack: the address of
// its first captured byte, its bytes (little-endian; the Snapshot's own
// memory, to be read and never written) and ok. GCSPR_EL0 (Regs.GCSPR)
// points into it; package unwind/gcs copies it
// (gcs.NewSnapshotView(data, base, s.Regs.GCSPR)). ok is false when the
// snapshot has no GCS (HasGCS false).
func (s *Snapshot) GCSRegion() (base uint64, data []byte, ok bool) {
	r := s.s.GCSRegion()
	if r == nil {
		return 0, nil, false
	}
	return r.Base, r.Bytes(), true
}
