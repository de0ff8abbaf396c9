//go:build !race || (!amd64 && !arm64)

package live

// testCallers is what the tests call: Callers, through one inlined logical
// frame of its own (skip+1). In race builds it is the cache-using copy of
// Callers instead (testcallers_race_test.go), so that the race detector
// checks the cache.
func testCallers(skip int, pc []uintptr) int { return Callers(clampSkip(max(skip, 0))+1, pc) }
