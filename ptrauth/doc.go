// Package ptrauth models Arm pointer authentication (FEAT_PAuth): PACIASP
// signs the link register with the stack pointer as modifier, AUTIASP
// authenticates it, XPACLRI strips it; PACDA, AUTDA and XPACD do the same
// for data pointers, PACGA computes a generic code.
//
// It follows the Arm Architecture Reference Manual's pseudocode (AddPAC,
// Auth, Strip, ComputePAC, CalculateBottomPACBit, EffectiveTBI) for the
// EL1&0 regime. QEMU's target/arm/tcg/pauth_helper.c was read for
// comparison; where the two differ the Arm ARM wins (see [Layout.AddPAC]).
// The code here is written from the rules, not copied.
//
// A [Layout] says which bits form the PAC field: the VA size of each
// translation half (the lowest PAC bit is 64 - TnSZ), top-byte-ignore
// (TBI, and TBID, which limits TBI to data addresses), and bit 55
// selecting the half. The field depends on the kind of pointer:
// instruction pointers (keys IA, IB) ignore the top byte only with TBI
// and not TBID, data pointers (keys DA, DB) whenever TBI is set.
// [Layout.Strip] (XPACI) and [Layout.StripData] (XPACD) make every field
// bit a copy of bit 55; [Layout.StripKernelStyle] is the Linux kernel's
// arithmetic form of the same operation. [FromRegisters] builds the layout,
// the algorithm and the features from TCR_EL1 and the ID registers.
//
// The strip is the one rule an unwinder runs per frame, and it has one
// home here: [Masks] are a layout's two fields for one kind of pointer,
// taken once with [Layout.InsnMasks] before a loop; [Masks.Strip] inlines
// to seven ALU operations without a branch or a load, within 1.4x of a
// constant mask in BenchmarkStrip. The shadow-call-stack copy and the
// frame-pointer walk are meant to call it rather than spell the masks out.
//
// [Layout.AddPAC], [Layout.Auth] and [Layout.AuthCombined] follow the
// feature switches: PAuth1 inserts the PAC and marks a failed
// authentication with a two-bit error code; [EPAC] zeroes the PAC of a
// pointer with bad extension bits; [PAuth2] XORs the PAC in, so a failure
// leaves the PAC difference in the pointer; [FPAC] turns a failed
// stand-alone AUT* into an error ([ErrAuthFailed]), as the hardware turns
// it into an exception, and [FPACCombine] does so also for the
// authentication inside RETAA, BRAA or LDRAA. Invalid combinations, keys
// and algorithms are errors wrapping [ErrInvalid], on every layout.
//
// [ComputePAC] offers the architected QARMA5 and QARMA3 ciphers (Avanzi,
// "The QARMA Block Cipher Family", ToSC 2017; table-driven, tested against
// QARMA64, the layer-by-layer reference that reproduces the paper's nine
// QARMA-64 test vectors) and ImpDef, QEMU's implementation-defined hash.
// The cipher tables are built on first use.
//
// A Layout is an immutable value; every function and method is safe for
// concurrent use.
package ptrauth
