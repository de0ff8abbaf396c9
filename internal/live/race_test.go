package live

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// In a race build Callers is runtime.Callers: no walk, no learning.
func TestRaceBuildIsRuntimeCallers(t *testing.T) {
	if !raceEnabled {
		t.Skip("not a race build")
	}
	resetCache()
	learns := learnCalls.Load()
	a, b := make([]uintptr, 64), make([]uintptr, 64)
	na, nb := callersSlow(0, a), Callers(0, b)
	if na != nb || !slices.Equal(a[1:na], b[1:nb]) {
		t.Fatalf("race build: %v != %v", framesOf(a[:na]), framesOf(b[:nb]))
	}
	if learnCalls.Load() != learns {
		t.Fatal("a race build learned")
	}
}

// callers_race.go's callersCached is a copy of callers.go's Callers.
func TestCallersCopyInSync(t *testing.T) {
	body := func(file, fn string) string {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		i := strings.Index(s, "\nfunc "+fn+"(skip int, pc []uintptr) int {\n")
		if i < 0 {
			t.Fatalf("%s: no func %s", file, fn)
		}
		s = s[i:]
		j := strings.Index(s, "\n}\n")
		if j < 0 {
			t.Fatalf("%s: %s has no end", file, fn)
		}
		return s[strings.Index(s, "{"):j]
	}
	if a, b := body("callers.go", "Callers"), body("callers_race.go", "callersCached"); a != b {
		t.Fatalf("callers_race.go's callersCached differs from callers.go's Callers:\n%s\n----\n%s", a, b)
	}
}
