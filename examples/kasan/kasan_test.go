package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/unwindkit/unwindkit/unwind/machine"
)

// norm writes this package's functions as they are named in the built
// command (main.f), not in the test binary (its import path).
func norm(s string) string {
	return strings.ReplaceAll(s, "github.com/unwindkit/unwindkit/examples/kasan.", "main.")
}

func normAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = norm(s)
	}
	return out
}

func testOptions(t *testing.T) options {
	o := options{record: "scs", policy: machine.ThreadInfo, pac: true, ops: 2000, liveIters: 500,
		profile: filepath.Join(t.TempDir(), "kasan.pprof")}
	if testing.Short() {
		o.ops, o.liveIters = 300, 50
	}
	return o
}

// TestRunOutput runs the command and checks its reports and summaries.
func TestRunOutput(t *testing.T) {
	for _, rec := range []string{"scs", "fp", "none"} {
		t.Run(rec, func(t *testing.T) {
			o := testOptions(t)
			o.record = rec
			var out bytes.Buffer
			if err := run(&out, o); err != nil {
				t.Fatal(err)
			}
			text := norm(out.String())
			want := []string{
				"BUG: KASAN: use-after-free in skb_copy_bits+0x",
				"Read of size 8 at addr ",
				"by task netd/412",
				"BUG: KASAN: use-after-free in ghes_read_estatus+0x",
				"by task writer/1337",
				"BUG: KASAN: double-free in seq_release+0x",
				"Free of addr ",
				"Allocated by task 412:\n",
				"Freed by task 1337:\n",
				"Freed by task 37:\n",
				"which belongs to the cache kmalloc-256 of size 256",
				"BUG: KASAN: use-after-free in main.skbCopyBits (live Go)",
				"BUG: KASAN: double-free in main.seqRelease (live Go)",
				"Wrote the live allocation profile to " + o.profile,
			}
			if rec == "none" {
				want = append(want, " (stack is not available)\n")
			} else {
				want = append(want,
					"Allocated by task 412:\n __alloc_skb+0x",
					"Freed by task 1337:\n dev_kfree_skb_irq+0x",
					"Freed by task 37:\n kfree_rcu_work+0x",
					" handle_arch_irq+0x",
					" ret_from_fork+0x8/0x")
			}
			for _, w := range want {
				if !strings.Contains(text, w) {
					t.Errorf("output lacks %q", w)
				}
			}
			if n := strings.Count(text, "BUG: KASAN: "); n != 5 {
				t.Errorf("%d KASAN reports, want 3 modelled + 2 live", n)
			}
			m := regexp.MustCompile(`Random workload: (\d+) ops .*, (\d+) reports\n`).FindStringSubmatch(text)
			if m == nil || m[1] != strconv.Itoa(o.ops) || m[2] != "0" {
				t.Errorf("random workload summary missing or reports found: %q", m)
			}
			if t.Failed() {
				t.Log(text)
			}
		})
	}
}

// TestLiveReports checks the live tracker's two reports frame by frame.
func TestLiveReports(t *testing.T) {
	tr, err := newLiveTracker()
	if err != nil {
		t.Fatal(err)
	}
	w := runLive(tr, 20)
	if len(tr.reports) != 0 {
		t.Fatalf("the bug-free live workload reported:\n%s", tr.reports[0].text)
	}
	liveBugs(w)
	if len(tr.reports) != 2 {
		t.Fatalf("%d live reports, want 2", len(tr.reports))
	}
	cases := []struct {
		kind, where               string
		task, allocTask, freeTask uint32
		alloc, free, here         []string
	}{
		{"use-after-free", "main.skbCopyBits", pidNetd, pidNetd, pidIRQ,
			[]string{"main.allocSkb", "main.tcpDataQueue", "main.ipRcv", "main.netifReceiveSkb", "main.liveBugs"},
			[]string{"main.devKfreeSkbIRQ", "main.netTxAction", "main.liveBugs"},
			[]string{"main.skbCopyBits", "main.ipRcvRead", "main.liveBugs"}},
		{"double-free", "main.seqRelease", pidWriter, pidWriter, pidWriter,
			[]string{"main.seqBufAlloc", "main.vfsWrite", "main.liveBugs"},
			[]string{"main.seqRelease", "main.liveBugs"},
			[]string{"main.seqRelease", "main.liveBugs"}},
	}
	for i, c := range cases {
		r := tr.reports[i]
		r.Where, r.Alloc, r.Free, r.Here = norm(r.Where), normAll(r.Alloc), normAll(r.Free), normAll(r.Here)
		if r.Kind != c.kind || r.Where != c.where || r.Task != c.task || r.AllocTask != c.allocTask || r.FreeTask != c.freeTask {
			t.Errorf("report %d: %s in %s task %d alloc %d free %d; want %s in %s task %d alloc %d free %d",
				i, r.Kind, r.Where, r.Task, r.AllocTask, r.FreeTask, c.kind, c.where, c.task, c.allocTask, c.freeTask)
		}
		for _, chk := range []struct {
			what      string
			got, want []string
		}{{"alloc", r.Alloc, c.alloc}, {"free", r.Free, c.free}, {"current", r.Here, c.here}} {
			if len(chk.got) < len(chk.want) || !slices.Equal(chk.got[:len(chk.want)], chk.want) {
				t.Errorf("report %d: %s stack %v, want it to start %v", i, chk.what, chk.got, chk.want)
			}
			if len(chk.got) == 0 || chk.got[len(chk.got)-1] != "runtime.goexit" {
				t.Errorf("report %d: %s stack %v does not end at runtime.goexit", i, chk.what, chk.got)
			}
		}
	}
}

// TestProfile writes the live profile and parses it back with the pprof
// library: one sample per distinct allocation stack, the right counts per
// allocation site, in-use counts that match the frees.
func TestProfile(t *testing.T) {
	iters := 200
	if testing.Short() {
		iters = 30
	}
	tr, err := newLiveTracker()
	if err != nil {
		t.Fatal(err)
	}
	w := runLive(tr, iters)
	liveBugs(w)
	path := filepath.Join(t.TempDir(), "live.pprof")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.WriteProfile(f); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	f, err = os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.CheckValid(); err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, st := range p.SampleType {
		types = append(types, st.Type+"/"+st.Unit)
	}
	if want := []string{"alloc_objects/count", "alloc_space/bytes", "inuse_objects/count", "inuse_space/bytes"}; !slices.Equal(types, want) {
		t.Fatalf("sample types %v, want %v", types, want)
	}
	if len(p.Sample) != len(tr.stats) {
		t.Errorf("%d samples, want one per distinct allocation stack (%d)", len(p.Sample), len(tr.stats))
	}
	// Allocations per site (the sample's leaf function): each goroutine
	// allocates iters objects; liveBugs allocates one skb and one buffer.
	wantSite := map[string][2]int64{ // objects, bytes
		"main.allocSkb":          {int64(iters + 1), int64(iters+1) * 256},
		"main.seqBufAlloc":       {int64(iters + 1), int64(iters+1) * 64},
		"main.ttyBufferAlloc":    {int64(2 * iters), int64(2*iters) * 128},
		"main.hrtimerAllocEvent": {int64(iters), int64(iters) * 96},
	}
	got := map[string][2]int64{}
	var allocs, inuse int64
	for _, s := range p.Sample {
		if len(s.Location) == 0 || len(s.Location[0].Line) == 0 {
			t.Fatalf("sample without a symbolized location: %v", s)
		}
		leaf := norm(s.Location[0].Line[0].Function.Name)
		v := got[leaf]
		got[leaf] = [2]int64{v[0] + s.Value[0], v[1] + s.Value[1]}
		allocs += s.Value[0]
		inuse += s.Value[2]
		last := s.Location[len(s.Location)-1].Line[0].Function.Name
		if last != "runtime.goexit" {
			t.Errorf("sample stack ends at %s, not runtime.goexit", last)
		}
	}
	for site, w := range wantSite {
		if got[site] != w {
			t.Errorf("site %s: %v objects/bytes, want %v", site, got[site], w)
		}
	}
	if len(got) != len(wantSite) {
		t.Errorf("allocation sites %v, want %v", got, wantSite)
	}
	if allocs != w.allocs.Load() || inuse != w.allocs.Load()-w.frees.Load() {
		t.Errorf("profile: %d allocs, %d in use; workload: %d allocs, %d frees", allocs, inuse, w.allocs.Load(), w.frees.Load())
	}
}
