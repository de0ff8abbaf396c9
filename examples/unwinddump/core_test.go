package main

import (
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func gunzipTo(t *testing.T, src, dst string) string {
	t.Helper()
	f, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), dst)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestDumpCore runs unwinddump on a committed core file: the PAC-signed
// signal crash, every frame PAC-stripped and explained.
func TestDumpCore(t *testing.T) {
	core := gunzipTo(t, "../../testdata/cores/cores/clang-pacret-pauth-signal.core.gz", "c.core")
	exe := gunzipTo(t, "../../testdata/cores/bin/clang-pacret.elf.gz", "clang-pacret.elf")
	if !isELF(core) || isELF("../../testdata/arm64/snapshots/gcc-pacret-pauth-signal.json") {
		t.Fatal("isELF")
	}
	var b strings.Builder
	if err := dumpCore(&b, core, []string{exe}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"1 thread(s)",
		"regs: pc handler_inner+",
		"shadow call stack: base 0x", "between guard pages (a guess",
		"handler_inner+", "sig_mid+", "sig_root+", "main+",
		"only FP: the walk's start pc",
		"only FP: the function that saved it did not push on the SCS",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// The compressed files directly.
	var z strings.Builder
	if err := dumpCore(&z, "../../testdata/cores/cores/clang-pacret-pauth-signal.core.gz", []string{"../../testdata/cores/bin/clang-pacret.elf.gz"}); err != nil {
		t.Fatal(err)
	}
	if strings.Count(z.String(), "sig_root+") != strings.Count(out, "sig_root+") {
		t.Errorf("compressed input gives different output:\n%s", z.String())
	}
	if err := dumpCore(&b, core, nil); err == nil || !strings.Contains(err.Error(), "needs its executable") {
		t.Errorf("core without executable: %v", err)
	}
}

// TestDumpVmcore describes a committed vmcore of Debian's 6.1 kernel.
func TestDumpVmcore(t *testing.T) {
	var b strings.Builder
	if err := dumpVmcore(&b, "../../testdata/vmcores/debian-6.1.0-57-va48.vmcore.gz"); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"Linux 6.1.0-", "2 CPU(s)", "PAGE_OFFSET 0xffff000000000000",
		"48-bit VA, LPA2 false: checked by translating swapper_pg_dir",
		"symbols decoded from the dump",
		"pt_regs.stackframe                 304  (table 6.1)",
		"thread_info.scs_sp               unknown",
		"cpu0: pc cpu_do_idle+", "frame record at x29: lr 0x",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
