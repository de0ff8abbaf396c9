package prologue

import (
	"bytes"
	"debug/elf"
	"errors"
	"os"
	"testing"
)

// FuzzNew feeds arbitrary bytes (seeded with the committed test binaries)
// through debug/elf and New: a malformed file is an error, never a panic,
// and every function New reports lies inside the file's text and answers
// CallBefore without panicking.
func FuzzNew(f *testing.F) {
	for _, name := range []string{"clang-pacret.elf", "gcc-pfe.elf"} {
		b, err := os.ReadFile("../../testdata/arm64/bin/" + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("\x7fELF"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ef, err := elf.NewFile(bytes.NewReader(data))
		if err != nil {
			return
		}
		b, err := New(ef)
		if err != nil {
			if ef.Machine != elf.EM_AARCH64 && !errors.Is(err, ErrNotArm64) {
				t.Fatalf("non-arm64 file: %v", err)
			}
			return
		}
		for _, fn := range b.Funcs() {
			if got, ok := b.FuncAt(fn.Addr); fn.Size > 0 && (!ok || got.Addr > fn.Addr) {
				t.Fatalf("FuncAt(%#x) = %+v, %v for %s", fn.Addr, got, ok, fn.Name)
			}
			b.CallBefore(fn.Addr + fn.Size)
			b.CallBefore(fn.Addr + 4)
		}
	})
}
