// Package ptrauth models Arm pointer authentication (FEAT_PAuth) as used on
// return addresses: PACIASP signs the link register with the stack pointer
// as modifier, AUTIASP authenticates it, XPACLRI strips it.
//
// It follows the Arm Architecture Reference Manual's pseudocode
// (AddPAC, Auth, Strip, ComputePAC), for which QEMU's
// target/arm/tcg/pauth_helper.c is a readable description; the code here is
// written from the rules, not copied. The block ciphers are QARMA5 and
// QARMA3 (Avanzi, "The QARMA Block Cipher Family", ToSC 2017), tested
// against the paper's QARMA-64 vectors, and QEMU's implementation-defined
// hash.
//
// A Layout says which bits form the PAC field: the VA size of each
// translation half (the lowest PAC bit is 64 - TnSZ), top-byte-ignore, and
// bit 55 selecting the half.
package ptrauth
