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
