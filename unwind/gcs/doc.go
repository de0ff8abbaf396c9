// Package gcs is the copy unwinder of arm64's Guarded Control Stack (GCS,
// FEAT_GCS), a third source of return addresses beside the shadow call
// stack (package [github.com/unwindkit/unwindkit/scs]) and the frame
// records (package [github.com/unwindkit/unwindkit/fp]), and the model of
// a thread's GCS it reads.
//
// # What is modelled
//
// The architecture (Arm ARM, FEAT_GCS) and Linux's user-space support
// (Documentation/arch/arm64/gcs.rst, arch/arm64/mm/gcs.c,
// arch/arm64/kernel/signal.c, since Linux 6.13; glibc 2.41 enables it
// with the tunable glibc.cpu.aarch64_gcs):
//
//   - Each thread has its own GCS, a region of 8-byte entries that grows
//     down, writable only by GCS operations. Linux allocates it when GCS
//     is enabled (PR_SET_SHADOW_STACK_STATUS) or a thread is created:
//     half of RLIMIT_STACK (of the clone's stack size for a thread),
//     between a page and 2 GiB. Its top word is 0, the top-of-stack
//     marker, and GCSPR_EL0 starts pointing at it.
//   - GCSPR_EL0 points at the newest entry. Every bl and blr pushes its
//     return address (the address of the next instruction, never signed
//     by PAC): GCSPR_EL0 -= 8, then the store. A push below the region
//     faults on the guard page (SIGSEGV).
//   - ret checks x30 against the newest entry and pops it (GCSPR_EL0 +=
//     8); a mismatch is a GCS exception (SIGSEGV, SEGV_CPERR).
//   - A cap token marks the top of a GCS that is not in use: bits 63:12
//     the address it is stored at, bits 11:0 GCS_CAP_VALID_TOKEN (1);
//     GCSSS1 replaces the cap of the stack it switches to with an
//     in-progress token (5), GCSSS2 leaves a valid cap on the stack
//     switched away from. Linux's map_shadow_stack writes one with
//     SHADOW_STACK_SET_TOKEN.
//   - Signal delivery (gcs_signal_entry) pushes two entries on the
//     interrupted GCS: at GCSPR_EL0-8 a signal cap token, the slot's own
//     address with bits 11:0 clear (GCS_SIGNAL_CAP), and at GCSPR_EL0-16
//     the return address of the handler, the sigreturn trampoline; the
//     signal frame's gcs_context records GCSPR_EL0-8, the cap's address.
//     rt_sigreturn sets GCSPR_EL0 from gcs_context, checks that the entry
//     there is the signal cap of that address, clears it to 0 and pops it.
//   - glibc's setjmp saves GCSPR_EL0 and longjmp pops entries (GCSPOPM)
//     until it is back, so a longjmp leaves no dead entry above GCSPR_EL0.
//
// [Thread] is that model: Call, Return, Signal, Sigreturn and PopTo
// change a thread's GCS as the hardware, the kernel and glibc do, and
// View describes it for the copy.
//
// # The copy unwinder
//
// [Save] copies return addresses from GCSPR_EL0 up into a caller's
// buffer with the skip of the kernel's stack_trace_save (skip counts
// return addresses, innermost first; tokens are not frames) and no
// per-frame callback; [Frames] yields each entry with its provenance
// ([fp.OriginGCS], its slot, the signal nesting it belongs to, whether
// it is a sigreturn trampoline). Both read only the View's memory (Save
// each slot at most once), from GCSPR_EL0 to the top marker, skipping signal
// cap tokens, and end at the marker or at a valid or in-progress cap. A
// View that is disabled (GCS off for the thread, or no GCS captured)
// gives ErrNotSupported (errors.Is unix.ENOSYS); GCSPR_EL0 misaligned or
// outside the memory, an entry that is no return address (not 4-byte
// aligned) and not a token, or memory that ends before the top marker is
// a *fault.CorruptError naming the rule and the address, with the frames
// found before it.
//
// # What the GCS sees that the others miss, and the reverse
//
// Every call pushes, in hardware: a leaf function's caller (its return
// address is in x30 only and in no frame record or SCS slot), an
// assembly function without a frame record or SCS push, and code built
// without the shadow call stack (glibc here) are all on the GCS. Signal
// frames are marked: the trampoline entry and the signal cap token say
// where the handler's frames end. What it does not hold: the innermost
// pc and the pc a signal interrupted (not return addresses; the
// interrupted pc is in the signal frame's sigcontext), tail calls (b does
// not push), and the frames that were running when GCS was enabled (with
// glibc: _start, below __libc_start_main, which enables it). The
// captures of testdata/arm64/gcs, taken under qemu-aarch64 11.1, check
// each of these against the program's source and gdb 18's backtrace.
//
// The front door reaches the same copy without this package: pass a
// View's Data, Base and GCSPR to unwind.NewGCSSource, or ask a snapshot
// for unwind.MethodGCS, and unwind.Save and Source.Frames give what Save
// and Frames here give. Entries adds each entry's signal depth. A core
// Linux wrote (6.13+, NT_ARM_GCS) gives the same copy through package
// unwind/core: Core.Frames(thread, unwind.MethodGCS).
//
// Linux uses GCS for user space only (the kernel's own stacks have none),
// so the machine model of package unwind/machine, a kernel's CPUs, has no
// GCS; a Thread is a user thread's.
package gcs
