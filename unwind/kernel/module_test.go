package kernel_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/unwindkit/unwindkit/internal/kcapture"
	"github.com/unwindkit/unwindkit/unwind/kernel"
	"github.com/unwindkit/unwindkit/unwind/vmcore"
)

const modCapture = "../../testdata/kernel/deb-6.1-mod"

// modStop opens the sysrq-t stop of the capture whose kernel ran the test
// module ukit (testdata/kernel/module): Debian's 6.1 cloud kernel, the
// module built against Debian's headers with the kernel's gcc-12.
func modStop(t *testing.T) (*kcapture.Capture, *kcapture.Stop) {
	t.Helper()
	cp, err := kcapture.OpenCapture(modCapture)
	if err != nil {
		t.Fatal(err)
	}
	for i := range cp.Expected.Stops {
		if s := &cp.Expected.Stops[i]; s.Name == "t" {
			return cp, s
		}
	}
	t.Fatal("no stop t")
	return nil, nil
}

// TestModuleFrames checks that frames in module text are named from the
// module list and the module's own symbol table read from the dump, as
// the kernel printed them: the ukit kthread's sysrq-t trace, through four
// functions of the module ("func+0xoff/0xsize [ukit]"), equals the walk
// frame by frame. The shipped symbols hold none of the module's (trim
// drops /proc/kallsyms' module lines), so the names can only come from
// the dump; and /proc/modules' line, printed by the guest, gives the
// module's base and size.
func TestModuleFrames(t *testing.T) {
	cp, s := modStop(t)
	for _, sym := range cp.Syms {
		if sym.Module != "" || strings.HasPrefix(sym.Name, "ukit_") {
			t.Fatalf("shipped symbols hold the module's %s [%s]: the test would not read the dump's", sym.Name, sym.Module)
		}
	}
	k, err := cp.Kernel(s)
	if err != nil {
		t.Fatal(err)
	}
	mods, err := k.Modules()
	if err != nil {
		t.Fatal(err)
	}
	con, err := os.ReadFile(filepath.Join(modCapture, "console.log"))
	if err != nil {
		t.Fatal(err)
	}
	// @@MODULE ukit 16384 0 - Live 0xffff800000be7000 (OE)
	m := regexp.MustCompile(`@@MODULE ukit (\d+) \d+ - Live (0x[0-9a-f]+)`).FindSubmatch(con)
	if m == nil {
		t.Fatal("console.log: no @@MODULE line")
	}
	size, _ := strconv.ParseUint(string(m[1]), 10, 64)
	base, _ := strconv.ParseUint(string(m[2]), 0, 64)
	var names []string
	var ukit *kernel.Module
	for i := range mods {
		names = append(names, mods[i].Name)
		if mods[i].Name == "ukit" {
			ukit = &mods[i]
		}
	}
	// The guest's /init loads qemu_fw_cfg, then ukit; the list is newest first.
	if !slices.Equal(names, []string{"ukit", "qemu_fw_cfg"}) {
		t.Fatalf("modules %q, want [ukit qemu_fw_cfg]", names)
	}
	if ukit.Base != base || ukit.Size != size {
		t.Errorf("ukit at %#x size %d, /proc/modules says %#x size %d", ukit.Base, ukit.Size, base, size)
	}
	var funcs []string
	for _, sym := range ukit.Syms {
		if sym.Type == 't' || sym.Type == 'T' {
			funcs = append(funcs, sym.Name)
		}
	}
	for _, want := range []string{"ukit_inner.constprop.0", "ukit_middle.constprop.0", "ukit_outer.constprop.0", "ukit_thread"} {
		if !slices.Contains(funcs, want) {
			t.Errorf("ukit's text symbols %q lack %s", funcs, want)
		}
	}
	var printed []string
	for _, tr := range cp.Expected.Traces {
		if tr.Stop == "t" && tr.Comm == "ukit" {
			printed = tr.Frames
		}
	}
	inMod := 0
	for _, f := range printed {
		if strings.HasSuffix(f, " [ukit]") {
			inMod++
		}
	}
	if inMod != 4 {
		t.Fatalf("printed trace of ukit %q: %d frames in the module, want 4", printed, inMod)
	}
	ts, err := k.Tasks(0)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, task := range ts {
		if task.Comm != "ukit" {
			continue
		}
		found = true
		w, err := k.TaskWalk(task)
		if err != nil {
			t.Fatal(err)
		}
		fs, _, err := w.Run()
		if err != nil {
			t.Fatal(err)
		}
		got := kcapture.Strings(k, fs)
		if !slices.Equal(got, printed) {
			t.Errorf("ukit (pid %d):\n walk    %q\n printed %q", task.PID, got, printed)
		}
	}
	if !found {
		t.Fatal("no task ukit in the task list")
	}
}

// TestModulesNeedTheListHead checks the answer without the `modules`
// symbol (a kallsyms with no data symbols and no System.map): an error
// naming the symbol, and module frames left as addresses, never named
// from a wrong symbol.
func TestModulesNeedTheListHead(t *testing.T) {
	cp, s := modStop(t)
	v, err := cp.Vmcore(s.Name)
	if err != nil {
		t.Fatal(err)
	}
	k0, err := cp.Kernel(s)
	if err != nil {
		t.Fatal(err)
	}
	syms := slices.DeleteFunc(slices.Clone(cp.Syms), func(s vmcore.KSym) bool { return s.Name == "modules" })
	k, err := kernel.New(v, syms, kernel.Options{BTF: k0.BTF, BTFFrom: "the first open", BTFBuild: k0.Build()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.Modules(); err == nil || !strings.Contains(err.Error(), "modules") {
		t.Errorf("Modules without the list head: %v, want an error naming it", err)
	}
	mods, _ := k0.Modules()
	for _, m := range mods {
		if m.Name != "ukit" {
			continue
		}
		for _, sym := range m.Syms {
			if sym.Name == "ukit_thread" {
				if got := k.Format(sym.Addr + 0x18); !strings.HasPrefix(got, "0x") {
					t.Errorf("ukit_thread+0x18 without the module list: %s, want the address", got)
				}
				if got := k0.Format(sym.Addr + 0x18); got != "ukit_thread+0x18/0x38 [ukit]" {
					t.Errorf("ukit_thread+0x18: %s", got)
				}
			}
		}
	}
}

// TestFormatWithoutDump checks that a Kernel made from its symbols alone
// (no New, no dump, as a caller naming pcs with the kernel's rules may
// make it) names pcs and says Modules has nothing to read: the module
// lookup in Sym panicked on its nil dump.
func TestFormatWithoutDump(t *testing.T) {
	k := &kernel.Kernel{Syms: []vmcore.KSym{{Name: "el1h_64_irq_handler", Addr: 0x1000, Size: 0x28, Type: 't'}}}
	if got := k.Format(0x1018); got != "el1h_64_irq_handler+0x18/0x28" {
		t.Errorf("Format: %s", got)
	}
	if _, err := k.Modules(); err == nil {
		t.Error("Modules without a dump: no error")
	}
}
