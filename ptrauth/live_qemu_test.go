package ptrauth

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/unwindkit/unwindkit/internal/needs"
)

// idRegsC reads the ID registers from EL0. Linux (and qemu-aarch64, which
// emulates its ABI) traps MRS of ID registers and returns the sanitised
// value, with the pointer-authentication fields visible.
const idRegsC = `#include <stdio.h>
int main(void) {
	unsigned long i1, i2;
	__asm__ volatile("mrs %0, ID_AA64ISAR1_EL1" : "=r"(i1));
	__asm__ volatile("mrs %0, S3_0_C0_C6_2" : "=r"(i2)); /* ID_AA64ISAR2_EL1 */
	printf("%lx %lx\n", i1, i2);
	return 0;
}
`

// TestFromRegistersLiveQEMU reads ID_AA64ISAR1/2_EL1 from a program
// running under qemu-aarch64 with several -cpu settings and checks what
// FromRegisters makes of them, so that the field positions are checked
// against an implementation nobody here wrote. It needs
// aarch64-linux-gnu-gcc and qemu-aarch64 (both installed in CI).
func TestFromRegistersLiveQEMU(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cross compiler and qemu-aarch64")
	}
	cc := needs.Tool(t, "aarch64-linux-gnu-gcc", "gcc-aarch64-linux-gnu")
	needs.File(t, "/usr/aarch64-linux-gnu/lib/libc.a", "libc6-dev-arm64-cross") // -static
	qemu := needs.Tool(t, "qemu-aarch64", "qemu-user")
	dir := t.TempDir()
	src, bin := filepath.Join(dir, "idregs.c"), filepath.Join(dir, "idregs")
	if err := os.WriteFile(src, []byte(idRegsC), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, "-O2", "-static", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cc, err, out)
	}
	tests := []struct {
		cpu string
		alg Algorithm
		off bool // no pointer authentication
	}{
		{"max", QARMA5, false},
		{"max,pauth-impdef=on", ImpDef, false},
		{"max,pauth=off", 0, true},
	}
	for _, tt := range tests {
		out, err := exec.Command(qemu, "-cpu", tt.cpu, bin).Output()
		if err != nil {
			t.Fatalf("qemu-aarch64 -cpu %s: %v", tt.cpu, err)
		}
		var r Registers
		if _, err := fmt.Sscanf(string(out), "%x %x", &r.ISAR1, &r.ISAR2); err != nil {
			t.Fatalf("-cpu %s: output %q: %v", tt.cpu, out, err)
		}
		r.TCR = tcrLinux48
		c, err := FromRegisters(r)
		t.Logf("-cpu %s: ID_AA64ISAR1_EL1 %#x ID_AA64ISAR2_EL1 %#x: %v %v %v", tt.cpu, r.ISAR1, r.ISAR2, c.Algorithm, c.Features, err)
		if tt.off {
			if !errors.Is(err, syscall.ENOSYS) {
				t.Errorf("-cpu %s: err = %v, want ErrNotSupported", tt.cpu, err)
			}
			continue
		}
		if err != nil || c.Algorithm != tt.alg || !c.Generic {
			t.Errorf("-cpu %s: %v %v generic %v, err %v; want %v with PACGA", tt.cpu, c.Algorithm, c.Features, c.Generic, err, tt.alg)
		}
	}
}
