//go:build amd64 || arm64

package live

func init() {
	benchExtra = append(benchExtra,
		benchUnwinder{"unchecked", func(pc []uintptr) int { n, _ := UncheckedFP(0, pc); return n }},
		benchUnwinder{"gounwind", func(pc []uintptr) int { return GounwindFP(0, pc) }})
}
