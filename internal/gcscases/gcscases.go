// Package gcscases holds what each unwinding technique finds of the GCS
// test program's scenarios (testdata/arm64/gcs/src), for the tests that
// unwind its captures side by side: qemu-user's snapshots (unwind/gcs)
// and Linux's cores (unwind/core). It is the rules' one statement:
//
//   - GCS: not the innermost pc nor the pc a signal interrupted (no return
//     addresses), nor _start (running when glibc's __libc_start_main
//     enabled GCS; a second thread's GCS, allocated at clone, holds all of
//     its frames). It sees a leaf's caller, the assembly function without
//     a frame record and its caller, glibc's frames and the sigreturn
//     trampoline.
//   - SCS: not the innermost pc, the interrupted pc, anything above main
//     (glibc and gcsrt.c are not instrumented), a leaf's caller (no push
//     in the leaf), the caller of the assembly function (no push in it);
//     after a longjmp it has two dead slots, since glibc's jmp_buf holds no
//     x18.
//   - FP: not a leaf's caller (only in x30) nor the caller of the assembly
//     function (no frame record: the walk goes from its callee's record to
//     its caller's caller).
package gcscases

import "slices"

// Glibc are glibc's frames below main or a thread's function (no SCS
// pushes).
var Glibc = []string{"__libc_start_call_main", "__libc_start_main", "_start", "start_thread", "thread_start"}

// Want returns the functions the GCS copy, the SCS copy and the FP walk
// find of scenario sc, whose chain from the source is chain (innermost
// first, the stopped function first), by the rules above.
func Want(sc string, chain []string) (gcs, scs, fp []string) {
	gcsMiss, scsMiss, fpMiss := []string{chain[0], "_start"}, append([]string{chain[0]}, Glibc...), []string(nil)
	switch sc {
	case "leaf":
		scsMiss = append(scsMiss, "leaf_mid")
		fpMiss = append(fpMiss, "leaf_mid")
	case "noframe":
		scsMiss = append(scsMiss, "asm_mid")
		fpMiss = append(fpMiss, "asm_mid")
	case "signal":
		gcsMiss = append(gcsMiss, "sig_raise")
		scsMiss = append(scsMiss, "sig_raise")
	}
	scs = Without(chain, scsMiss...)
	if sc == "longjmp" {
		// lj_deep's and lj_mid's pushes, never popped.
		scs = []string{"lj_after", "lj_top", "lj_mid", "lj_top", "run_longjmp", "main"}
	}
	return Without(chain, gcsMiss...), scs, Without(chain, fpMiss...)
}

// Without returns chain less the first occurrence of each of names.
func Without(chain []string, names ...string) []string {
	out := slices.Clone(chain)
	for _, n := range names {
		if i := slices.Index(out, n); i >= 0 {
			out = slices.Delete(out, i, i+1)
		}
	}
	return out
}
