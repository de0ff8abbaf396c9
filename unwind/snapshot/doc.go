// Package snapshot unwinds captures of real arm64 threads: registers,
// stack and shadow call stack regions, symbols, the PAC layout (va_bits,
// tbi) and optionally the known call chain, in unwindkit's JSON format
// (version 1, documented at [Load] and in testdata/README.md).
//
// [Snapshot.Source] returns the front door's
// [github.com/unwindkit/unwindkit/unwind.Source] over the capture: the SCS
// copy from x18 down to scs_base, the FP walk from x29 over every stack
// region, ending at a zero frame pointer as an AAPCS64 user-space chain
// does; unwind.CompareTraces explains what each technique misses.
// testdata/arm64 holds captures of programs built by clang and GCC with
// -fsanitize=shadow-call-stack and pac-ret, run under qemu-aarch64, and
// the script that rebuilds them. A capture may also hold the Guarded
// Control Stack (regs.gcspr and a region of kind "gcs": Regs.GCSPR,
// GCSRegion), which package unwind/gcs copies; testdata/arm64/gcs holds
// captures of a GCS program run under qemu-aarch64 11.1.
package snapshot
