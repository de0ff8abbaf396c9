package main

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The KASAN boots of testdata/kernel/kasan.sh (issue 27): three 6.12
// kernels with SCS and generic KASAN that differ only in how
// kasan_save_stack collects its trace, each booted under
// qemu-system-aarch64 -icount shift=0,sleep=off to its init's first line.
const kasanDir = "../../testdata/kernel/kasan"

type kasanBoot struct {
	variant              string
	run                  int
	insns, calls, frames int64
}

func readKasanResults(t *testing.T) []kasanBoot {
	t.Helper()
	f, err := os.Open(kasanDir + "/results.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var boots []kasanBoot
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		fs := strings.Fields(sc.Text())
		if len(fs) != 5 {
			t.Fatalf("results.txt:%d: %d fields, want 5 (variant run insns calls frames)", line, len(fs))
		}
		b := kasanBoot{variant: fs[0]}
		var nums [4]int64
		for i, s := range fs[1:] {
			if nums[i], err = strconv.ParseInt(s, 10, 64); err != nil || nums[i] < 0 {
				t.Fatalf("results.txt:%d: field %d: %q", line, i+2, s)
			}
		}
		b.run, b.insns, b.calls, b.frames = int(nums[0]), nums[1], nums[2], nums[3]
		boots = append(boots, b)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return boots
}

// consoleBoot reads what kasan.sh reads from a boot's console: the
// printk time of the init's "@@INIT" line (microseconds of a clock that
// counts one nanosecond per instruction: thousands of instructions) and
// the "kasan_save_stack: how H, C calls, F frames" counts.
func consoleBoot(t *testing.T, path string) (insns, how, calls, frames int64) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data = bytes.ReplaceAll(data, []byte("\r"), nil)
	initRE := regexp.MustCompile(`(?m)^\[ *(\d+)\.(\d{6})\] @@INIT$`)
	m := initRE.FindSubmatch(data)
	if m == nil {
		t.Fatalf("%s: no @@INIT line", path)
	}
	sec, _ := strconv.ParseInt(string(m[1]), 10, 64)
	usec, _ := strconv.ParseInt(string(m[2]), 10, 64)
	insns = (sec*1e6 + usec) * 1000
	countRE := regexp.MustCompile(`kasan_save_stack: how (\d), (\d+) calls, (\d+) frames\n`)
	c := countRE.FindSubmatch(data)
	if c == nil {
		t.Fatalf("%s: no kasan_save_stack counts line", path)
	}
	how, _ = strconv.ParseInt(string(c[1]), 10, 64)
	calls, _ = strconv.ParseInt(string(c[2]), 10, 64)
	frames, _ = strconv.ParseInt(string(c[3]), 10, 64)
	return
}

// consoleDepths reads the boot's "kasan_save_stack depths: D:N ..." line
// (empty for a kernel that collects nothing) with -boot's parser.
func consoleDepths(t *testing.T, path string) bootShape {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`kasan_save_stack depths:([ 0-9:]*)\n`).FindSubmatch(data)
	if m == nil {
		t.Fatalf("%s: no kasan_save_stack depths line", path)
	}
	if len(bytes.TrimSpace(m[1])) == 0 {
		return nil
	}
	b, err := parseBootShape(string(bytes.TrimSpace(m[1])))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return b
}

var kasanVariants = []struct {
	name string
	how  int64
	none string // the variant of the same KASAN mode that collects nothing
}{{"fp", 0, "none"}, {"scs", 1, "none"}, {"none", 2, "none"}, {"hw-fp", 0, "hw-none"}, {"hw-scs", 1, "hw-none"}, {"hw-none", 2, "hw-none"}}

// TestKernelKASANBoots checks the shipped boots against their consoles:
// every variant (generic KASAN and MTE's KASAN_HW_TAGS, each collecting
// stacks by the FP walk, by the SCS copy and not at all) booted at least 3
// times; each variant's runs made the same recordings (calls and frames)
// and their instruction counts agree to 0.1% (-icount with sleep=off on
// one vCPU: the runs repeat but for a few thousand instructions); each
// boot's numbers are what its console printed (the first run's console is
// shipped); and the kernels that collect nothing recorded no frames.
func TestKernelKASANBoots(t *testing.T) {
	boots := readKasanResults(t)
	for _, v := range kasanVariants {
		var runs []kasanBoot
		for _, b := range boots {
			if b.variant == v.name {
				runs = append(runs, b)
			}
		}
		if len(runs) < 3 {
			t.Errorf("%s: %d boots, want at least 3", v.name, len(runs))
			continue
		}
		lo, hi := runs[0].insns, runs[0].insns
		for _, r := range runs {
			lo, hi = min(lo, r.insns), max(hi, r.insns)
			if r.calls != runs[0].calls || r.frames != runs[0].frames {
				t.Errorf("%s run %d: %d calls, %d frames; run %d: %d, %d", v.name, r.run, r.calls, r.frames,
					runs[0].run, runs[0].calls, runs[0].frames)
			}
		}
		if float64(hi-lo) > 0.001*float64(lo) {
			t.Errorf("%s: instruction counts from %d to %d: more than 0.1%% apart", v.name, lo, hi)
		}
		if runs[0].calls == 0 {
			t.Errorf("%s: no kasan_save_stack calls", v.name)
		}
		if (runs[0].frames == 0) != (v.how == 2) {
			t.Errorf("%s: %d frames collected", v.name, runs[0].frames)
		}
		path := fmt.Sprintf("%s/console-%s.txt", kasanDir, v.name)
		insns, how, calls, frames := consoleBoot(t, path)
		if how != v.how || insns != runs[0].insns || calls != runs[0].calls || frames != runs[0].frames {
			t.Errorf("%s: console says how %d, %d insns, %d calls, %d frames; results.txt %d, %d, %d", path, how, insns, calls, frames,
				runs[0].insns, runs[0].calls, runs[0].frames)
		}
		// The depth histogram adds up to the recordings and their frames.
		var hc, hf int64
		for _, d := range consoleDepths(t, path) {
			hc += int64(d.calls)
			hf += int64(d.calls * d.depth)
		}
		if v.how != 2 && (hc != calls || hf != frames) || v.how == 2 && hc != 0 {
			t.Errorf("%s: the depth histogram holds %d recordings of %d frames; the counts %d and %d", path, hc, hf, calls, frames)
		}
	}
}

// kasanTable is kasan.sh's table, computed here from results.txt.
func kasanTable(boots []kasanBoot) []string {
	mean := func(v string) (m float64, n int, lo, hi int64, b kasanBoot) {
		lo = math.MaxInt64
		for _, x := range boots {
			if x.variant == v {
				m += float64(x.insns)
				n++
				lo, hi, b = min(lo, x.insns), max(hi, x.insns), x
			}
		}
		return m / float64(n), n, lo, hi, b
	}
	var rows []string
	for _, v := range kasanVariants {
		none, _, _, _, _ := mean(v.none)
		m, n, lo, hi, b := mean(v.name)
		depth := "-"
		if b.calls > 0 && b.frames > 0 {
			depth = fmt.Sprintf("%.1f", float64(b.frames)/float64(b.calls))
		}
		rows = append(rows, fmt.Sprintf("| %s | %d | %.0f | %d | %.3fx | %.1f%% | %d | %s |", v.name, n, m, hi-lo, m/none, 100*(m-none)/m, b.calls, depth))
	}
	return rows
}

// TestKernelKASANTableInREADME checks that the README's KASAN table is the
// one the shipped results give.
func TestKernelKASANTableInREADME(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range kasanTable(readKasanResults(t)) {
		if !bytes.Contains(readme, []byte(row+"\n")) {
			t.Errorf("README.md lacks the row\n%s", row)
		}
	}
}

// TestBootPrediction runs -boot on the fp kernel's histogram of depths
// and on its mean depth: both techniques recorded at each depth (the
// model's path fitted to it).
func TestBootPrediction(t *testing.T) {
	hist := consoleDepths(t, kasanDir+"/console-fp.txt")
	calls, frames := 0, 0
	for _, d := range hist {
		calls += d.calls
		frames += d.calls * d.depth
	}
	depth := int(math.Round(float64(frames) / float64(calls)))
	o := testOptions(t)
	for _, c := range []struct {
		shape bootShape
		head  string
	}{
		{hist, fmt.Sprintf("%d kasan_save_stack calls at %d depths, %.1f frames on average", calls, len(hist), float64(frames)/float64(calls))},
		{bootShape{{depth, calls}}, fmt.Sprintf("%d kasan_save_stack calls of %d frames", calls, depth)},
	} {
		var out bytes.Buffer
		if err := predictBoot(&out, c.shape, o); err != nil {
			t.Fatal(err)
		}
		for _, w := range []string{c.head, "\n  fp ", "\n  scs ", "fp/scs collection cost: "} {
			if !strings.Contains(out.String(), w) {
				t.Errorf("-boot output lacks %q:\n%s", w, out.String())
			}
		}
	}
	if b, err := parseBootShape("3:10,5:2"); err != nil || len(b) != 2 || b[1] != (bootDepth{5, 2}) {
		t.Errorf("-boot 3:10,5:2: %v, %v", b, err)
	}
	for _, bad := range []string{"10", "0,5", "3:0", "3:1 3:2", "x:1", ""} {
		if _, err := parseBootShape(bad); err == nil {
			t.Errorf("-boot %q: no error", bad)
		}
	}
}

// FuzzParseBootShape: -boot's parser never panics, and what it accepts is
// positive, distinct depths with positive counts, read back the same from
// its own D:N form.
func FuzzParseBootShape(f *testing.F) {
	for _, s := range []string{"20669,18", "7:3 8:71 9:113", "3:10,5:2", "", "3:1 3:2", "9999999999999999999:1", "1:"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, err := parseBootShape(s)
		if err != nil {
			if b != nil {
				t.Fatalf("%q: %v with a shape %v", s, err, b)
			}
			return
		}
		seen := map[int]bool{}
		var parts []string
		for _, d := range b {
			if d.depth <= 0 || d.calls <= 0 || seen[d.depth] {
				t.Fatalf("%q: %v", s, b)
			}
			seen[d.depth] = true
			parts = append(parts, fmt.Sprintf("%d:%d", d.depth, d.calls))
		}
		again, err := parseBootShape(strings.Join(parts, " "))
		if err != nil || !slices.Equal(again, b) {
			t.Fatalf("%q: %v, read back %v, %v", s, b, again, err)
		}
	})
}
