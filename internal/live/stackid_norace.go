//go:build (amd64 || arm64) && !race

package live

// idCallers is the Callers that ResolveID asks (skip 0 is its caller).
func idCallers(skip int, pc []uintptr) int { return Callers(skip+1, pc) }
