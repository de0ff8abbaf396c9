// Package ptrauth models Arm pointer authentication (FEAT_PAuth) as used on
// return addresses: PACIASP signs the link register with the stack pointer
// as modifier, AUTIASP authenticates it, XPACLRI strips it.
//
// It follows the Arm Architecture Reference Manual's pseudocode (AddPAC,
// Auth, Strip, ComputePAC), for which QEMU's target/arm/tcg/pauth_helper.c
// is a readable description; the code here is written from the rules, not
// copied.
//
// A Layout says which bits form the PAC field: the VA size of each
// translation half (the lowest PAC bit is 64 - TnSZ), top-byte-ignore
// (TBI, and TBID, which limits TBI to data addresses), and bit 55
// selecting the half. Strip (XPACI) makes every field bit a copy of bit 55
// and is cheap enough for an unwinder's inner loop; StripKernelStyle is
// the Linux kernel's arithmetic form of the same operation.
//
// Sign (AddPAC) and Auth follow the feature switches: PAuth1 inserts the
// PAC and marks a failed authentication with a two-bit error code; PAuth2
// XORs the PAC in, so a failure leaves the PAC difference in the pointer;
// FPAC turns a failure into an error (ErrAuthFailed), as the hardware turns
// it into an exception.
//
// ComputePAC offers the architected QARMA5 and QARMA3 ciphers (Avanzi,
// "The QARMA Block Cipher Family", ToSC 2017; table-driven, tested against
// QARMA64, the layer-by-layer reference that reproduces the paper's nine
// QARMA-64 test vectors) and ImpDef, QEMU's implementation-defined hash.
// The cipher tables are built on first use.
//
// A Layout is an immutable value; every function and method is safe for
// concurrent use.
package ptrauth
