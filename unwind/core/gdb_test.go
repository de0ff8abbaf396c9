package core_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/unwindkit/unwindkit/internal/needs"
	"github.com/unwindkit/unwindkit/unwind/core"
)

// TestGDBLive runs gdb-multiarch on every committed PAC-off core (as
// build.sh did when it wrote the .gdb.txt files) and holds the unwinders
// against its live output. CI installs gdb-multiarch (.ci/run); without it
// the test is skipped.
func TestGDBLive(t *testing.T) {
	if testing.Short() {
		t.Skip("runs gdb 16 times")
	}
	gdb := needs.Tool(t, "gdb-multiarch", "gdb-multiarch")
	tmp := t.TempDir()
	for _, c := range captures(t) {
		if c.cpu != "nopauth" {
			continue
		}
		t.Run(filepath.Base(c.path), func(t *testing.T) {
			corePath := filepath.Join(tmp, filepath.Base(c.path)+".core")
			exePath := filepath.Join(tmp, filepath.Base(c.exe)+".elf")
			if err := os.WriteFile(corePath, gunzip(t, c.path), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(exePath, gunzip(t, c.exe), 0o755); err != nil {
				t.Fatal(err)
			}
			args := []string{"-q", "-nx", "-batch", exePath, corePath}
			if c.scenario == "signal" {
				args = append(args, "-ex", "frame 1") // gdb 13 loops past qemu's signal trampoline
			} else {
				args = append(args, "-ex", "bt")
			}
			out, err := exec.Command(gdb, args...).Output()
			if err != nil {
				t.Fatalf("gdb: %v", err)
			}
			live := gdbFrames(t, bytes.NewReader(out))
			g, err := os.ReadFile(strings.TrimSuffix(c.path, ".core.gz") + ".gdb.txt")
			if err != nil {
				t.Fatal(err)
			}
			if stored := gdbFrames(t, bytes.NewReader(g)); !slices.Equal(live, stored) {
				t.Errorf("gdb now gives %#x, build.sh stored %#x", live, stored)
			}
			checkAgainstGDB(t, load(t, c), c, live)
		})
	}
}

// TestPIE checks the dynamically linked PIE's cores: the executable's
// load bias from AT_ENTRY, libc found through the dynamic linker's link
// map in the core.
func TestPIE(t *testing.T) {
	n := 0
	for _, c := range captures(t) {
		if !strings.Contains(c.path, "gcc-pie") {
			continue
		}
		n++
		co := load(t, c)
		if len(co.Objects) < 2 {
			t.Fatalf("%s: objects %+v: want the PIE and libc", c.path, co.Objects)
		}
		exe := co.Objects[0]
		if exe.Bias == 0 || exe.BiasFrom != "AT_ENTRY - e_entry" || exe.Symbols == 0 {
			t.Errorf("%s: executable %+v: want a non-zero bias from AT_ENTRY and symbols", c.path, exe)
		}
		libc := slices.IndexFunc(co.Objects, func(o core.Object) bool { return filepath.Base(o.Path) == "libc.so.6" })
		if libc < 0 || co.Objects[libc].Bias == 0 || co.Objects[libc].BiasFrom != "link map l_addr" {
			t.Errorf("%s: libc not found through the link map: %+v", c.path, co.Objects)
		}
		if got := co.Symbolizer().Func(co.Layout.Strip(co.Threads[0].Regs.PC)); got != chains[c.scenario].known[0] {
			t.Errorf("%s: pc in %s, want %s", c.path, got, chains[c.scenario].known[0])
		}
	}
	if n != 2 {
		t.Fatalf("%d PIE cores, want 2", n)
	}
}
