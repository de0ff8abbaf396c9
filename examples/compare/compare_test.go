package main

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
)

// table is one Markdown table of the output, under its heading.
type table struct {
	heading string
	header  []string
	rows    [][]string
}

func cells(line string) []string {
	line = strings.TrimSpace(line)
	line = strings.TrimPrefix(line, "|")
	line = strings.TrimSuffix(line, "|")
	parts := strings.Split(line, "|")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts
}

// parseTables finds every Markdown table and the heading above it.
func parseTables(t *testing.T, out string) []table {
	t.Helper()
	var tables []table
	var heading string
	lines := strings.Split(out, "\n")
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.HasPrefix(l, "#### ") {
			heading = strings.TrimPrefix(l, "#### ")
			continue
		}
		if !strings.HasPrefix(l, "|") {
			continue
		}
		tb := table{heading: heading, header: cells(l)}
		if i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "|--") && !strings.HasPrefix(lines[i+1], "|:-") {
			t.Fatalf("table %q: no separator line after the header", heading)
		}
		i += 2
		for ; i < len(lines) && strings.HasPrefix(lines[i], "|"); i++ {
			r := cells(lines[i])
			if len(r) != len(tb.header) {
				t.Fatalf("table %q: row %q has %d cells, header %d", heading, lines[i], len(r), len(tb.header))
			}
			tb.rows = append(tb.rows, r)
		}
		tables = append(tables, tb)
	}
	return tables
}

// positive parses a number cell ("12.3", "4.5x", "13.2%") and reports
// whether it is a positive number.
func positive(cell string) bool {
	cell = strings.TrimSuffix(strings.TrimSuffix(cell, "x"), "%")
	v, err := strconv.ParseFloat(cell, 64)
	return err == nil && v > 0
}

func number(cell string) bool {
	cell = strings.TrimSuffix(strings.TrimSuffix(cell, "x"), "%")
	_, err := strconv.ParseFloat(cell, 64)
	return err == nil
}

// TestShortRun runs the command in -short mode and checks the tables'
// structure: every section, every row, numbers where numbers belong,
// positive times and ratios. It checks no timing.
func TestShortRun(t *testing.T) {
	var buf bytes.Buffer
	if err := run(&buf, true); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"Measured by `go run ./examples/compare` on ", "GOMAXPROCS", "go1.",
		"the ratios, measured in the same run, are the result",
		"the seed patch claimed ~30%", "6-13%"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	tables := parseTables(t, out)
	type spec struct {
		heading   string
		rows      int
		firstCols []string // expected first cells, row by row (nil: any)
		ratioCol  int      // column of a ratio that must be positive (-1 none)
		timeCols  []int    // columns of times that must be positive
	}
	specs := []spec{
		{"Modelled arm64 stack: shadow call stack copy vs frame-pointer walk", 6,
			[]string{"8", "32", "128", "8", "32", "128"}, 5, []int{2, 3, 4}},
		{"Shadow call stack entry policies", 9,
			[]string{"thread_info", "thread_info", "thread_info", "on-stack", "on-stack", "on-stack", "per-cpu", "per-cpu", "per-cpu"}, 5, []int{4}},
		{"Live Go unwinding", 3, []string{"8", "32", "128"}, -1, []int{1, 2}},
		{"Capturing a deduplicated stack", 3, []string{"8", "32", "128"}, 9, []int{1, 2, 3, 4}},
		{"Stack depot", 8, nil, 4, []int{1, 2, 3}},
		{"Capturing a deduplicated stack on the model", 6,
			[]string{"SCS copy", "SCS copy", "SCS copy", "FP walk", "FP walk", "FP walk"}, 5, []int{2, 3, 4}},
		{"One KASAN stack recording", 8, nil, 5, []int{3, 4}},
		{"KASAN workload on the model", 6, nil, 4, []int{2, 3}},
	}
	if len(tables) != len(specs) {
		t.Fatalf("%d tables, want %d:\n%s", len(tables), len(specs), out)
	}
	for i, sp := range specs {
		tb := tables[i]
		if !strings.HasPrefix(tb.heading, sp.heading) {
			t.Errorf("table %d heading %q, want %q...", i, tb.heading, sp.heading)
		}
		if len(tb.rows) != sp.rows {
			t.Errorf("table %q: %d rows, want %d", sp.heading, len(tb.rows), sp.rows)
		}
		for j, r := range tb.rows {
			if sp.firstCols != nil && j < len(sp.firstCols) && r[0] != sp.firstCols[j] {
				t.Errorf("table %q row %d starts %q, want %q", sp.heading, j, r[0], sp.firstCols[j])
			}
			if sp.ratioCol >= 0 && (!strings.HasSuffix(r[sp.ratioCol], "x") || !positive(r[sp.ratioCol])) {
				t.Errorf("table %q row %d: ratio %q is not a positive ratio", sp.heading, j, r[sp.ratioCol])
			}
			for _, c := range sp.timeCols {
				if !positive(r[c]) {
					t.Errorf("table %q row %d: time %q is not positive", sp.heading, j, r[c])
				}
			}
		}
	}
	// Live unwinding: every column after depth is a number, every
	// speed-up a positive ratio, whichever unwinders this build has.
	live := tables[2]
	if live.header[2] != "runtime.Callers" {
		t.Errorf("live table's baseline column is %q", live.header[2])
	}
	for _, r := range live.rows {
		for c := 1; c < len(r); c++ {
			if !positive(r[c]) {
				t.Errorf("live table: cell %q (%s) not positive", r[c], live.header[c])
			}
		}
	}
	// Depot: three operations on one goroutine and on several, then the
	// hit with the producer's hash on both.
	for j, op := range []string{"save, hit", "save, hit, ", "save, miss", "save, miss, ", "fetch", "fetch, ",
		"save, hit, the producer's hash", "save, hit, the producer's hash (`SaveHashed`), "} {
		if !strings.HasPrefix(tables[4].rows[j][0], op) {
			t.Errorf("depot row %d is %q, want %q...", j, tables[4].rows[j][0], op)
		}
	}
	// Recording: the same number of frames for both techniques, task
	// traces longer than IRQ traces (cut at the entry).
	rec := tables[6]
	task, err1 := strconv.Atoi(rec.rows[0][1])
	irq, err2 := strconv.Atoi(rec.rows[4][1])
	if err1 != nil || err2 != nil || irq <= 0 || task <= irq {
		t.Errorf("recording table: task frames %q, IRQ frames %q", rec.rows[0][1], rec.rows[4][1])
	}
	// KASAN: share column "-" for none, a percentage or "below noise" for
	// SCS and FP.
	for j, r := range tables[7].rows {
		if j%3 == 0 {
			if r[5] != "-" || r[4] != "1.00x" {
				t.Errorf("KASAN row %d (none): %v", j, r)
			}
		} else if !number(r[5]) && r[5] != "below noise" {
			t.Errorf("KASAN row %d: share %q is not a number", j, r[5])
		}
	}
	if t.Failed() {
		t.Log(out)
	}
}

func TestCPUModel(t *testing.T) {
	if cpuModel() == "" {
		t.Error("cpuModel returned nothing")
	}
}
