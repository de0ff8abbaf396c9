package main

import (
	"strings"
	"testing"
)

// TestKcoreSnapshot runs the command on the shipped /proc/kcore-format
// snapshot of the Debian 6.1 live run (kcore.sh): read by virtual
// address, without CPUs, every thread walked from its cpu_context, the
// tun module's frames named "[tun]" as the kernel's /proc/PID/stack
// names them (results.json.gz holds those lines).
func TestKcoreSnapshot(t *testing.T) {
	dir := "../../testdata/kernel/kcore-6.1"
	out, errOut, rc := cmd(t, "-tasks", "-btf", "../../testdata/kernel/deb-6.1/l-syscall.vmcore.gz", dir+"/snapshot.kcore.gz", dir+"/ksyms.txt.gz")
	if rc != 0 {
		t.Fatalf("exit %d: %s", rc, errOut)
	}
	tasks := strings.Count(out, "\n== task pid ")
	if !strings.Contains(out, "0 CPU(s)") || tasks < 400 || !strings.Contains(out, "tun_do_read+0x640/0x7d0 [tun]") {
		t.Errorf("%d tasks walked, want at least 400, tun_do_read named in [tun], no CPUs:\n%.3000s", tasks, out)
	}
}
