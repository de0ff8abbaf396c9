package gcs_test

import (
	"testing"

	"github.com/unwindkit/unwindkit/internal/benchbody"
	"github.com/unwindkit/unwindkit/unwind"
	"github.com/unwindkit/unwindkit/unwind/gcs"
)

// BenchmarkCaptures measures the three copies of the same real stops
// (testdata/arm64/gcs) side by side: the GCS copy (gcs.Save), the SCS
// copy and the FP walk (unwind.Save over the snapshot's Sources), each
// into a 256-entry store with skip 0. frames/op is what each technique
// finds there and ns/frame the time per frame found:
//
//	go test -run '^$' -bench Captures -cpu 1 -count 10 ./unwind/gcs
func BenchmarkCaptures(b *testing.B) {
	for _, c := range loadCaptures(b) {
		if c.name == "deep" {
			continue // no frame records to walk: BenchmarkDeep
		}
		s := c.s
		store := make([]uint64, 256)
		v := view(b, s)
		run := func(name string, save func() (int, error)) {
			b.Run(c.name+"/"+name, func(b *testing.B) {
				n, err := save()
				if err != nil || n == 0 {
					b.Fatalf("%d frames, %v", n, err)
				}
				stop := cpuClock()
				for b.Loop() {
					save()
				}
				cpu := stop()
				b.ReportMetric(float64(n), "frames/op")
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/frame")
				b.ReportMetric(float64(cpu)/float64(b.N)/float64(n), "cpu-ns/frame")
			})
		}
		run("gcs", func() (int, error) { return gcs.Save(&v, store, 0) })
		for _, m := range []unwind.Method{unwind.MethodSCS, unwind.MethodFP} {
			src, err := s.Source(m)
			if err != nil {
				b.Fatal(err)
			}
			run(m.String(), func() (int, error) { return unwind.Save(src, store, 0) })
		}
	}
}

// BenchmarkDeep: the GCS copy of the full 32 KiB GCS of the overflow
// capture, 4095 entries, into stores of 8, 32, 128 and 4096 entries.
func BenchmarkDeep(b *testing.B) {
	for _, c := range loadCaptures(b) {
		if c.name != "deep" {
			continue
		}
		v := view(b, c.s)
		for _, n := range []int{8, 32, 128, 4096} {
			store := make([]uint64, n)
			b.Run(c.name+"/"+itoa(n), func(b *testing.B) {
				got, _ := gcs.Save(&v, store, 0)
				stop := cpuClock()
				for b.Loop() {
					gcs.Save(&v, store, 0)
				}
				cpu := stop()
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(got), "ns/frame")
				b.ReportMetric(float64(cpu)/float64(b.N)/float64(got), "cpu-ns/frame")
			})
		}
	}
}

func itoa(n int) string {
	s := ""
	for {
		s = string(rune('0'+n%10)) + s
		if n /= 10; n == 0 {
			return s
		}
	}
}

// BenchmarkModel: the GCS copy of a modelled thread at the depths of the
// SCS-versus-FP report's model table (the body examples/compare runs for
// its GCS column):
//
//	go test -run '^$' -bench Model -cpu 1 ./unwind/gcs
func BenchmarkModel(b *testing.B) {
	for _, depth := range benchbody.ModelDepths {
		v, err := benchbody.GCSView(depth)
		if err != nil {
			b.Fatal(err)
		}
		b.Run("depth="+itoa(depth), func(b *testing.B) {
			stop := cpuClock()
			benchbody.GCSSave(b, &v, depth)
			b.ReportMetric(float64(stop())/float64(b.N)/float64(depth), "cpu-ns/frame")
		})
	}
}
