//go:build race && (amd64 || arm64)

package live

// testCallers is what the tests call: in race builds, where Callers is
// runtime.Callers, the cache-using copy of Callers (callersCached), through
// one inlined logical frame of its own (skip+1).
func testCallers(skip int, pc []uintptr) int { return callersCached(clampSkip(max(skip, 0))+1, pc) }
