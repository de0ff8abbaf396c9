package debuginfo

// SetRecoverPanics sets whether Lookup turns a panic into an error, and
// returns the old setting.
func SetRecoverPanics(on bool) bool {
	old := recoverPanics
	recoverPanics = on
	return old
}

// DecodedUnits returns how many compilation units f holds decoded, and
// whether the units .debug_aranges leaves out were scanned.
func DecodedUnits(f *File) (n int, scanned bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.cus), f.index != nil && f.index.scanned
}

// UsesWholeSection reports whether f made its whole-.debug_info Data (for
// units with cross-unit references).
func UsesWholeSection(f *File) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.full != nil
}

// UnitShape decodes the unit at off, through per-unit Data or (whole) the
// whole-section Data, and returns how many function DIEs and line rows it
// holds.
func UnitShape(f *File, off uint64, whole bool) (nodes, rows int, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.forceWhole = whole
	defer func() { f.forceWhole = false }()
	u := &unit{}
	err = f.decodeUnit(u, off)
	return len(u.nodes), len(u.rows), err
}

// UnitOffsets lists the offsets of the units in .debug_info.
func UnitOffsets(f *File) ([]uint64, error) {
	var out []uint64
	for off := uint64(0); off < f.infoSize(); {
		h, err := f.unitAt(off)
		if err != nil {
			return nil, err
		}
		out = append(out, off)
		off = h.end
	}
	return out, nil
}

// CheckRanges makes f compare each DIE's ranges with debug/dwarf's Ranges
// as it decodes, failing the lookup on a difference.
func CheckRanges(f *File) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.checkRanges = true
}
