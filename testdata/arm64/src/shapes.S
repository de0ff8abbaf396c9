// shapes.S: prologue shapes the compilers here do not emit, assembled for
// the prologue scanner's tests (internal/prologue TestAssembledShapes).
// Not run. Each function is sized, so the scanner reads exactly its code.
	.arch armv8.5-a+pauth
	.text

	.macro func name
	.globl \name
	.type \name, %function
	.p2align 2
\name:
	.endm
	.macro endfunc name
	.size \name, . - \name
	.endm

// The control: a frame record, x29 = sp.
	func sp_frame
	stp	x29, x30, [sp, #-16]!
	mov	x29, sp
	bl	sp_frame
	ldp	x29, x30, [sp], #16
	ret
	endfunc sp_frame

// Register 31 here is xzr, not sp: the pair is stored but x29 is zeroed,
// so there is no frame record (the walk would end at x29 = 0).
	func xzr_not_frame
	stp	x29, x30, [sp, #-16]!
	mov	x29, xzr
	bl	sp_frame
	ldp	x29, x30, [sp], #16
	ret
	endfunc xzr_not_frame

// The same with orr spelled out: x29 = xzr | xzr.
	func orr_xzr_not_frame
	stp	x29, x30, [sp, #-32]!
	orr	x29, xzr, xzr
	bl	sp_frame
	ldp	x29, x30, [sp], #32
	ret
	endfunc orr_xzr_not_frame

// Non-hint signing with SP as the modifier: the same PAC as paciasp.
	func pacia_sp
	pacia	x30, sp
	stp	x29, x30, [sp, #-16]!
	mov	x29, sp
	bl	sp_frame
	ldp	x29, x30, [sp], #16
	autia	x30, sp
	ret
	endfunc pacia_sp

	func pacib_sp
	pacib	x30, sp
	stp	x29, x30, [sp, #-16]!
	mov	x29, sp
	bl	sp_frame
	ldp	x29, x30, [sp], #16
	autib	x30, sp
	ret
	endfunc pacib_sp

// Signing another register is not return-address signing.
	func pacia_x16
	pacia	x16, sp
	stp	x29, x30, [sp, #-16]!
	mov	x29, sp
	blr	x16
	ldp	x29, x30, [sp], #16
	ret
	endfunc pacia_x16

// Patchable-entry NOPs before the landing pad.
	func nops_then_bti
	nop
	nop
	bti	c
	paciasp
	stp	x29, x30, [sp, #-16]!
	mov	x29, sp
	bl	sp_frame
	ldp	x29, x30, [sp], #16
	autiasp
	ret
	endfunc nops_then_bti

// A BTI in the body (a jump target) is not an entry landing pad.
	func bti_in_body
	stp	x29, x30, [sp, #-16]!
	mov	x29, sp
	bl	sp_frame
	bti	j
	ldp	x29, x30, [sp], #16
	ret
	endfunc bti_in_body

// A local function: in .symtab only, never in .dynsym.
	.type local_helper, %function
	.p2align 2
local_helper:
	ret
	.size local_helper, . - local_helper
