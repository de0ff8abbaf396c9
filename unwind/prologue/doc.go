// Package prologue scans the functions of an arm64 ELF file for the
// instructions that matter to unwinding: the shadow call stack push and
// pop that clang's -fsanitize=shadow-call-stack emits, return-address
// signing and authentication (-mbranch-protection=pac-ret, the B key),
// frame records, -fpatchable-function-entry NOPs and the ftrace
// "mov x9, x30", BTI landing pads, and calls. [Binary.CallBefore] checks
// that the instruction before a return address is a call, as a reliable
// unwinder may (the kernel's arch_stack_walk_reliable relies on every
// return address following a bl). Instructions are decoded with
// golang.org/x/arch/arm64/arm64asm.
package prologue
