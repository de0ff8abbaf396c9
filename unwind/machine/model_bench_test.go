package machine_test

import (
	"fmt"
	"testing"

	"github.com/unwindkit/unwindkit/internal/benchbody"
	"github.com/unwindkit/unwindkit/unwind"
)

// BenchmarkModelSave is the SCS copy against the FP walk on the same
// modelled stack (a recursion depth frames deep), through unwind.Save: the
// body examples/compare runs for the README's first table.
//
//	go test -run '^$' -bench ModelSave -count 6 ./unwind/machine
func BenchmarkModelSave(b *testing.B) {
	for _, pac := range []bool{false, true} {
		for _, depth := range benchbody.ModelDepths {
			for _, method := range []unwind.Method{unwind.MethodSCS, unwind.MethodFP} {
				b.Run(fmt.Sprintf("pac=%v/depth=%d/%v", pac, depth, method), func(b *testing.B) {
					src, err := benchbody.ModelSource(method, pac, depth)
					if err != nil {
						b.Fatal(err)
					}
					benchbody.ModelSave(b, src, depth)
				})
			}
		}
	}
}
