// Package benchbody holds the benchmark bodies that both the packages'
// benchmarks (go test -bench) and the report command examples/compare run,
// so that the README's tables and go test -bench measure the same code on
// the same data: the stack depot against its peers (a map behind a mutex,
// a sync.Map) and the hashing floor, and the modelled machine's SCS copy
// and FP walk through the front door.
//
// Each body is a func(*testing.B); a package benchmark calls it from
// b.Run, and examples/compare runs it through [Measure] (testing.Benchmark,
// interleaved, fastest of several runs).
//
// It is test plumbing, not part of the model: it sits above the public
// packages it measures (depot, unwind, unwind/machine) and nothing but
// tests and examples import it.
package benchbody
