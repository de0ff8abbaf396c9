package main

import (
	"slices"
	"strings"
	"testing"
)

// TestUserGCS checks -method gcs on a core Linux 7.2 wrote with
// NT_ARM_GCS (testdata/arm64/gcs/cores, the signal scenario), in text
// and JSON; on a qemu-aarch64 core, which has no NT_ARM_GCS (not
// supported, said per thread); on a GCS snapshot; and its refusal for a
// vmcore.
func TestUserGCS(t *testing.T) {
	gc, sym := td+"arm64/gcs/cores/signal.core.gz", td+"arm64/gcs/cores/gcs-core.sym.gz"
	want := []string{"handler_mid", "on_usr1", "", "sig_mid", "run_signal", "main", "__libc_start_call_main", "__libc_start_main"}

	text, errs, code := cmd(t, "-method", "gcs", gc, sym)
	if code != 0 {
		t.Fatal(errs)
	}
	for _, s := range []string{"guarded control stack: GCSPR_EL0 0xfffff7dfffb0, features enabled 0x1", "GCS copy: 8 frames",
		"handler_mid+0x10", "__libc_start_main+0x308", "[gcs, slot 0xfffff7dffff0]"} {
		if !strings.Contains(text, s) {
			t.Errorf("-method gcs text lacks %q:\n%s", s, text)
		}
	}
	if strings.Contains(text, "why they differ") || strings.Contains(text, "gcs ended with") {
		t.Errorf("-method gcs printed the comparison or an error:\n%s", text)
	}
	if both, _, _ := cmd(t, gc, sym); !strings.Contains(both, "guarded control stack: GCSPR_EL0 0xfffff7dfffb0") || !strings.Contains(both, "why they differ") {
		t.Errorf("default method: no GCS line or no comparison:\n%s", both)
	}

	out, errs, code := cmd(t, "-json", "-method", "gcs", gc, sym)
	if code != 0 {
		t.Fatal(errs)
	}
	d := decode(t, out)
	if len(d.Stacks) != 1 || d.Stacks[0].GCS == nil || d.Stacks[0].SCS != nil || d.Stacks[0].FP != nil || len(d.Stacks[0].Errors) != 0 {
		t.Fatalf("-json -method gcs: %+v", d.Stacks)
	}
	var got []string
	for _, f := range d.Stacks[0].GCS.Frames {
		got = append(got, f.Symbol)
		if f.Origin != "gcs" || f.Stack != "gcs" {
			t.Errorf("frame %+v: origin and stack want gcs", f)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("JSON GCS frames %q, want %q", got, want)
	}
	if !slices.ContainsFunc(d.Stacks[0].Notes, func(n string) bool { return strings.Contains(n, "GCSPR_EL0 0xfffff7dfffb0") }) {
		t.Errorf("notes %q lack the GCS registers", d.Stacks[0].Notes)
	}

	// A qemu-aarch64 core: no NT_ARM_GCS, not supported.
	qc, exe := td+"cores/cores/clang-pacret-pauth-signal.core.gz", td+"cores/bin/clang-pacret.elf.gz"
	text, _, code = cmd(t, "-method", "gcs", qc, exe)
	if code != 0 || !strings.Contains(text, "guarded control stack: none (no NT_ARM_GCS note)") || !strings.Contains(text, "GCS copy: 0 frames") ||
		!strings.Contains(text, "gcs ended with: ") || !strings.Contains(text, "not supported") {
		t.Errorf("-method gcs on a qemu core: exit %d\n%s", code, text)
	}
	out, _, _ = cmd(t, "-json", "-method", "gcs", qc, exe)
	if d := decode(t, out); d.Stacks[0].GCS == nil || d.Stacks[0].GCS.End != "error" || len(d.Stacks[0].GCS.Frames) != 0 {
		t.Errorf("-json -method gcs on a qemu core: %+v", d.Stacks[0].GCS)
	}

	// A snapshot with a GCS (qemu-user, gdb).
	snap := td + "arm64/gcs/snapshots/chain.json"
	text, _, code = cmd(t, "-method", "gcs", snap)
	if code != 0 || !strings.Contains(text, "GCS copy: 7 frames") || !strings.Contains(text, "chain_d+") {
		t.Errorf("-method gcs on a GCS snapshot: exit %d\n%s", code, text)
	}

	vm := td + "kernel/deb-6.12/l-ipi.vmcore.gz"
	if _, errs, code := cmd(t, "-method", "gcs", vm); code != 2 || !strings.Contains(errs, "-method gcs is for user cores and snapshots") {
		t.Errorf("-method gcs on a vmcore: exit %d %s", code, errs)
	}
	if _, errs, code := cmd(t, "-method", "dwarf", gc, sym); code != 2 || !strings.Contains(errs, "want scs, fp, both or gcs") {
		t.Errorf("-method dwarf: exit %d %s", code, errs)
	}
}
