package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// addr2line reads `addr2line -a -f -i` output: per address its frames,
// innermost first, as "func file:line".
func addr2line(t *testing.T, path string) (addrs []uint64, frames map[uint64][]string) {
	b, err := gunzipFile(path)
	if err != nil {
		t.Fatal(err)
	}
	frames = map[uint64][]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	var cur uint64
	var fn string
	for n := 0; sc.Scan(); n++ {
		l := sc.Text()
		if strings.HasPrefix(l, "0x") {
			cur, _ = strconv.ParseUint(l[2:], 16, 64)
			addrs = append(addrs, cur)
			fn = ""
			continue
		}
		if fn == "" {
			fn = l
			continue
		}
		file, line, _ := strings.Cut(l, ":")
		line, _, _ = strings.Cut(line, " ")
		frames[cur] = append(frames[cur], fmt.Sprintf("%s %s:%s", fn, filepath.Base(file), line))
		fn = ""
	}
	return addrs, frames
}

// The command's file:line and inlined frames equal addr2line's at every
// instruction of a binary with inlining three deep (testdata/debuginfo),
// for the addresses where binutils and llvm-symbolizer agree.
func TestLinesAgainstAddr2line(t *testing.T) {
	exe := td + "debuginfo/bin/gcc-dwarf5.elf.gz"
	d, err := readObject(exe)
	if err != nil {
		t.Fatal(err)
	}
	var l lines
	l.add(io.Discard, exe, bytes.NewReader(d), int64(len(d)), 0)
	if len(l.files) != 1 {
		t.Fatal("no DWARF read")
	}
	defer l.close()
	addrs, want := addr2line(t, td+"debuginfo/bin/gcc-dwarf5.addr2line.gz")
	_, llvm := addr2line(t, td+"debuginfo/bin/gcc-dwarf5.llvm-symbolizer.gz")
	same, inl, checked := 0, 0, 0
	for _, a := range addrs {
		w := want[a]
		if fmt.Sprint(w) != fmt.Sprint(llvm[a]) || len(w) == 0 || strings.HasPrefix(w[0], "??") {
			continue
		}
		checked++
		s, ok := l.lookup(a, true)
		var got []string
		if ok {
			for _, in := range s.inlined {
				got = append(got, fmt.Sprintf("%s %s:%d", in.Function, filepath.Base(in.File), in.Line))
			}
			// The concrete function is the last of addr2line's frames.
			cut := strings.Fields(w[len(w)-1])[0]
			got = append(got, fmt.Sprintf("%s %s:%d", cut, filepath.Base(s.file), s.line))
		}
		if fmt.Sprint(got) == fmt.Sprint(w) {
			same++
			if len(w) > 1 {
				inl++
			}
		} else if checked-same <= 5 {
			t.Errorf("%#x: %q, addr2line %q", a, got, w)
		}
	}
	t.Logf("%d of %d addresses equal addr2line's, %d with inlined frames", same, checked, inl)
	if same != checked || inl == 0 {
		t.Errorf("%d of %d addresses equal, %d with inlined frames", same, checked, inl)
	}
}

// A user core of a program built with -g: each frame's file:line equals
// gdb's bt (testdata/kernel/usercore/gdb-bt.txt), in text and JSON.
func TestCoreLinesAgainstGDB(t *testing.T) {
	core, exe := td+"kernel/usercore/core.gz", td+"kernel/usercore/crash"
	out, errs, code := cmd(t, "-json", "-method", "fp", core, exe)
	if code != 0 {
		t.Fatal(errs)
	}
	var d jsonDoc
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range d.Stacks[0].FP.Frames {
		if f.File != "" {
			got = append(got, fmt.Sprintf("%s %s:%d", f.Symbol, filepath.Base(f.File), f.Line))
		}
	}
	// gdb: #0 leaf crash.c:17, #2 level2 :28, #3 level1 :33, #4 main :43
	// (level3, gdb's #1, is the caller only x30 holds: X30Only).
	want := []string{"leaf crash.c:17", "level2 crash.c:28", "level1 crash.c:33", "main crash.c:43"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("frames %q, gdb %q", got, want)
	}
	text, _, _ := cmd(t, core, exe)
	if !strings.Contains(text, "#3 main+0x38 at testdata/kernel/usercore/crash.c:43") {
		t.Errorf("text output lacks main's line:\n%s", text)
	}
}
