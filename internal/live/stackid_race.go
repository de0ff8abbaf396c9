//go:build (amd64 || arm64) && race

package live

// idCallers is the Callers that ResolveID asks (skip 0 is its caller): the
// cache's, for the tests that run the walk in race builds (IDs.walkInRace).
func idCallers(skip int, pc []uintptr) int { return callersCached(skip+1, pc) }
