/* noframe.S: hand-written functions without frame records.
 *
 * noframe_call(v): keeps x30 on the stack (no frame record, x29 left
 * alone, no shadow call stack push) and calls capture_here. Its
 * return into asm_mid is on the GCS (pushed by asm_mid's bl); an FP walk
 * from capture_here's record goes from noframe_call straight to
 * asm_mid's caller.
 *
 * gcs_descend(n): calls itself n times with bl and never returns: no
 * stack, no frame records, one GCS entry per call. With n larger than
 * the GCS holds, the push that finds the guard page faults. */
	.text
	.globl	noframe_call
	.type	noframe_call, %function
	.p2align 2
noframe_call:
	str	x30, [sp, #-16]!
	bl	capture_here
	ldr	x30, [sp], #16
	ret
	.size	noframe_call, . - noframe_call

	.globl	gcs_descend
	.type	gcs_descend, %function
	.p2align 2
gcs_descend:
	subs	x0, x0, #1
	b.eq	gcs_bottom
	bl	gcs_descend
gcs_bottom:
	bl	capture_here
1:	b	1b
	.size	gcs_descend, . - gcs_descend

	.section .note.GNU-stack,"",%progbits
	/* GNU_PROPERTY_AARCH64_FEATURE_1_AND (0xc0000000): GCS (bit 2). */
	.section .note.gnu.property,"a"
	.p2align 3
	.word	4, 16, 5
	.asciz	"GNU"
	.word	0xc0000000, 4, 4, 0
