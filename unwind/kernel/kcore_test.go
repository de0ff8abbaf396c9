package kernel_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/unwindkit/unwindkit/internal/kcapture"
	"github.com/unwindkit/unwindkit/internal/kcorecheck"
	"github.com/unwindkit/unwindkit/unwind/kernel"
	"github.com/unwindkit/unwindkit/unwind/vmcore"
)

// kcoreRuns are the shipped live runs (testdata/kernel/kcore.sh) and the
// capture of the same kernel build whose trimmed vmcore holds its BTF
// ("": the snapshot holds it, kcoreguest -snapshot-btf); scs: the kernel
// has shadow call stacks, and the copies of its blocked tasks are held
// against their FP walks (kcorecheck.CompareSCS).
var kcoreRuns = []struct {
	dir, btfFrom string
	scs          bool
}{
	{"kcore-6.1", "deb-6.1", false},
	{"kcore-6.12", "deb-6.12", false},
	{"kcore-scs-6.12", "", true},
}

func gunzipFile(t *testing.T, path string, limit int64) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	b, err := io.ReadAll(io.LimitReader(zr, limit+1))
	if err != nil || int64(len(b)) > limit {
		t.Fatalf("%s: %d bytes, %v", path, len(b), err)
	}
	return b
}

// TestKcoreResults checks the shipped live runs: at least 1,000
// comparisons per kernel of a task walked from /proc/kcore with the
// kernel's own /proc/PID/stack, every one equal or explained by a named
// rule (kcorecheck.Check); and, without booting, the last round again:
// each task walked from the trimmed snapshot of the pages that round
// read gives, for every task walked consistently, exactly the lines the
// guest printed, which for the tasks judged equal are the kernel's own
// /proc/PID/stack. On the kernel with shadow call stacks, at least 500
// blocked tasks' SCS copies held against FP walks equal to
// /proc/PID/stack, every frame only one has explained by a named rule,
// and each copied again from the snapshot as the guest copied it.
func TestKcoreResults(t *testing.T) {
	for _, run := range kcoreRuns {
		dir := filepath.Join("../../testdata/kernel", run.dir)
		var res kcorecheck.Results
		if err := json.Unmarshal(gunzipFile(t, filepath.Join(dir, "results.json.gz"), 64<<20), &res); err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		counts := map[string]int{}
		snapshot := map[int]kcorecheck.Comparison{}
		scsChecked, scsEqualProc, notes := 0, 0, map[string]int{}
		for _, c := range res.Comparisons {
			if err := kcorecheck.Check(c); err != nil {
				t.Errorf("%s: %v", run.dir, err)
			}
			counts[c.Verdict]++
			if c.SCSChecked {
				scsChecked++
				if c.Verdict == kcorecheck.Equal || c.Verdict == kcorecheck.EqualRetried {
					scsEqualProc++ // the FP walk it was held against is /proc/PID/stack
				}
				for _, n := range c.SCSNotes {
					_, rule, _ := strings.Cut(n, ": ")
					rule, _, _ = strings.Cut(rule, " (")
					notes[rule]++
				}
			}
			if c.Snapshot && c.Consistent {
				snapshot[c.TID] = c // the others' bytes are of several moments
			}
		}
		if len(res.Comparisons) < 1000 || counts[kcorecheck.Equal]+counts[kcorecheck.EqualRetried] < len(res.Comparisons)/2 {
			t.Errorf("%s: %d comparisons (%v): want at least 1,000, most of them equal", run.dir, len(res.Comparisons), counts)
		}
		t.Logf("%s: %d comparisons in %d rounds: %v", run.dir, len(res.Comparisons), len(res.Rounds), counts)
		if run.scs != (scsChecked > 0) || run.scs && scsEqualProc < 500 {
			t.Errorf("%s: %d SCS copies held against the FP walk, %d of them against /proc/PID/stack's lines: want them on an SCS kernel only, at least 500", run.dir, scsChecked, scsEqualProc)
		}
		if run.scs {
			t.Logf("%s: %d SCS copies held against the FP walk (%d against /proc/PID/stack's lines); frames only one has, by rule: %v", run.dir, scsChecked, scsEqualProc, notes)
		}

		// The snapshot round, walked again from the shipped pages.
		var opts kernel.Options
		if run.btfFrom != "" {
			cp, err := kcapture.OpenCapture(filepath.Join("../../testdata/kernel", run.btfFrom))
			if err != nil {
				t.Fatal(err)
			}
			k0, err := cp.Kernel(&cp.Expected.Stops[0])
			if err != nil {
				t.Fatal(err)
			}
			opts = kernel.Options{BTF: k0.BTF, BTFFrom: run.btfFrom, BTFBuild: k0.Build()}
		}
		snap := gunzipFile(t, filepath.Join(dir, "snapshot.kcore.gz"), 256<<20)
		v, err := vmcore.Load("snapshot.kcore", bytes.NewReader(snap), int64(len(snap)))
		if err != nil {
			t.Fatal(err)
		}
		if !v.Virtual || v.Live || v.TaskStruct == nil {
			t.Fatalf("%s: snapshot: virtual %v live %v task_struct %d bytes", run.dir, v.Virtual, v.Live, len(v.TaskStruct))
		}
		syms, err := vmcore.ParseKallsyms(bytes.NewReader(gunzipFile(t, filepath.Join(dir, "ksyms.txt.gz"), 16<<20)))
		if err != nil {
			t.Fatal(err)
		}
		k, err := kernel.New(v, syms, opts)
		if err != nil {
			t.Fatal(err)
		}
		if k.BTF == nil || k.HasSCS() != run.scs {
			t.Fatalf("%s: snapshot: BTF %v (notes %q), shadow call stacks %v", run.dir, k.BTF != nil, k.Notes, k.HasSCS())
		}
		ts, err := k.Threads(0)
		if err != nil {
			t.Fatalf("%s: snapshot threads: %v", run.dir, err)
		}
		walked, equal := 0, 0
		for _, task := range ts {
			c, ok := snapshot[task.PID]
			if !ok {
				continue
			}
			walked++
			r := k.TaskWalkLive(task, 1)
			lines, err := k.ProcStack(r.Frames)
			if err != nil {
				t.Fatal(err)
			}
			errS := ""
			if r.Err != nil {
				errS = r.Err.Error()
			}
			if !slices.Equal(lines, c.Kcore) || errS != c.KcoreErr || !r.Consistent {
				t.Errorf("%s: snapshot tid %d %s: walk %q (%s, consistent %v), the guest's %q (%s)", run.dir, task.PID, task.Comm, lines, errS, r.Consistent, c.Kcore, c.KcoreErr)
			}
			var again kcorecheck.Comparison
			if err := kcorecheck.CompareSCS(&again, k, r); err != nil {
				t.Fatal(err)
			}
			if again.SCSChecked != c.SCSChecked || !slices.Equal(again.SCS, c.SCS) || again.SCSErr != c.SCSErr || !slices.Equal(again.SCSNotes, c.SCSNotes) {
				t.Errorf("%s: snapshot tid %d %s: SCS copy %q (%s) %q, the guest's %q (%s) %q", run.dir, task.PID, task.Comm, again.SCS, again.SCSErr, again.SCSNotes, c.SCS, c.SCSErr, c.SCSNotes)
			}
			if c.Verdict == kcorecheck.Equal || c.Verdict == kcorecheck.EqualRetried {
				equal++
			}
		}
		if walked != len(snapshot) || walked < 100 {
			t.Errorf("%s: %d of the snapshot round's %d tasks found in the snapshot's task list (%d tasks)", run.dir, walked, len(snapshot), len(ts))
		}
		t.Logf("%s: snapshot: %d tasks walked again, %d of them equal to /proc/PID/stack in the guest", run.dir, walked, equal)
	}
}
