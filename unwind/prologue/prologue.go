package prologue

import (
	"debug/elf"

	"github.com/unwindkit/unwindkit/internal/prologue"
)

// Binary is an arm64 ELF file's functions, each scanned for the
// instructions that matter to unwinding: the shadow call stack push and
// pop ("str x30, [x18], #8" / "ldr x30, [x18, #-8]!"), return-address
// signing and authentication (paciasp/autiasp, the B-key forms, retaa/
// retab), a frame record ("stp x29, x30, [sp, #-N]!" + "mov x29, sp"),
// patchable-function-entry NOPs or the ftrace "mov x9, x30", BTI, and
// calls. Binary.CallBefore checks that the instruction before a return
// address is a call, as a reliable unwinder may. It is immutable and safe
// for concurrent use.
type Binary struct {
	b     *prologue.Binary
	funcs []FuncShape
}

// ErrNotArm64 is returned for an ELF file that is not AArch64.
var ErrNotArm64 = prologue.ErrNotArm64

// ErrNoFuncSymbols is returned for an ELF file with no function symbol in
// .symtab or .dynsym.
var ErrNoFuncSymbols = prologue.ErrNoFuncSymbols

// OpenBinary opens and scans the arm64 ELF file at path.
func OpenBinary(path string) (*Binary, error) { return wrap(prologue.Open(path)) }

// NewBinary scans an already opened arm64 ELF file.
func NewBinary(f *elf.File) (*Binary, error) { return wrap(prologue.New(f)) }

// ScanCode scans one function's code (little-endian A64) at addr.
func ScanCode(name string, addr uint64, code []byte) FuncShape {
	return shape(prologue.ScanCode(name, addr, code))
}
