package main

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// fuzzFile is one file of a fuzz base: its name in the directory the
// base is written to, its bytes, and whether it is written compressed.
type fuzzFile struct {
	name string
	data []byte
	gz   bool
}

// fuzzBase is one input of unwinddump: files written to a directory and
// the arguments (relative to it; "." is the directory itself).
type fuzzBase struct {
	files []fuzzFile
	args  []string
}

func gunzipFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, err
	}
	return io.ReadAll(zr)
}

// oneStop returns dir's expected.json with only the stop named stop (its
// own vmcore then holds the BTF, or the walk goes without).
func oneStop(dir, stop string) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(dir, "expected.json"))
	if err != nil {
		return nil, err
	}
	var e map[string]json.RawMessage
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, err
	}
	var stops []map[string]json.RawMessage
	if err := json.Unmarshal(e["stops"], &stops); err != nil {
		return nil, err
	}
	for _, s := range stops {
		if string(s["name"]) == `"`+stop+`"` {
			e["stops"], _ = json.Marshal([]any{s})
			return json.MarshalIndent(e, "", " ")
		}
	}
	return nil, fmt.Errorf("%s: no stop %s", dir, stop)
}

// fuzzBases are small shipped inputs of each kind: a snapshot, a vmcore,
// a user core with its executable, two one-stop kernel captures (a
// kernel without shadow call stacks at its sysrq-t stop, one with them
// stopped inside a prologue), a vmcore with every task, and a Linux core
// with NT_ARM_GCS under -method gcs.
var fuzzBases = sync.OnceValues(func() ([]fuzzBase, error) {
	const td = "../../testdata/"
	snap, err := os.ReadFile(td + "arm64/snapshots/gcc-pacret-pauth-signal.json")
	if err != nil {
		return nil, err
	}
	vm, err := gunzipFile(td + "kernel/deb-6.12/l-ipi.vmcore.gz")
	if err != nil {
		return nil, err
	}
	core, err := gunzipFile(td + "cores/cores/gcc-pie-pauth-leaf.core.gz")
	if err != nil {
		return nil, err
	}
	exe, err := gunzipFile(td + "cores/bin/gcc-pie.elf.gz")
	if err != nil {
		return nil, err
	}
	out := []fuzzBase{
		{files: []fuzzFile{{"s.json", snap, false}}, args: []string{"s.json"}},
		{files: []fuzzFile{{"v.vmcore", vm, false}}, args: []string{"-info", "v.vmcore"}},
		{files: []fuzzFile{{"c.core", core, false}, {"gcc-pie.elf.gz", exe, true}}, args: []string{"c.core", "gcc-pie.elf.gz"}},
	}
	for _, c := range []struct{ dir, stop string }{{"deb-6.12", "t"}, {"scs-6.12", "x30"}} {
		dir := td + "kernel/" + c.dir
		exp, err := oneStop(dir, c.stop)
		if err != nil {
			return nil, err
		}
		v, err := gunzipFile(filepath.Join(dir, c.stop+".vmcore.gz"))
		if err != nil {
			return nil, err
		}
		b := fuzzBase{files: []fuzzFile{{"expected.json", exp, false}, {c.stop + ".vmcore.gz", v, true}}, args: []string{"."}}
		for _, n := range []string{"syms.txt.gz", "kallsyms.txt.gz", "datasyms.txt.gz"} {
			s, err := gunzipFile(filepath.Join(dir, n))
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				return nil, err
			}
			b.files = append(b.files, fuzzFile{n, s, true})
		}
		out = append(out, b)
	}
	// A vmcore unwound with a symbol map, every task, and the BTF of the
	// first stop's vmcore (the shipped file, not edited).
	d := td + "kernel/deb-6.12/"
	tv, err := gunzipFile(d + "t.vmcore.gz")
	if err != nil {
		return nil, err
	}
	sm, err := gunzipFile(d + "syms.txt.gz")
	if err != nil {
		return nil, err
	}
	btf, err := filepath.Abs(d + "l-syscall.vmcore.gz")
	if err != nil {
		return nil, err
	}
	out = append(out, fuzzBase{files: []fuzzFile{{"t.vmcore", tv, false}, {"System.map", sm, false}},
		args: []string{"-tasks", "t.vmcore", "System.map", "-btf", btf}})
	// Linux 7.2's core of the GCS program (NT_ARM_GCS, the GCS mapping)
	// with its symbol table, copied with -method gcs.
	gc, err := gunzipFile(td + "arm64/gcs/cores/signal.core.gz")
	if err != nil {
		return nil, err
	}
	gs, err := gunzipFile(td + "arm64/gcs/cores/gcs-core.sym.gz")
	if err != nil {
		return nil, err
	}
	out = append(out, fuzzBase{files: []fuzzFile{{"gcs.core", gc, false}, {"gcs", gs, false}},
		args: []string{"-method=gcs", "gcs.core", "gcs"}})
	return out, nil
})

// patch applies the edits of p to copies of files: each edit is a file
// index byte, a 4-byte little-endian offset (modulo the file's size) and
// a length byte followed by that many bytes (at most 32) written there;
// a length of 0xff truncates the file at the offset instead.
func patch(files []fuzzFile, p []byte) [][]byte {
	out := make([][]byte, len(files))
	for i, f := range files {
		out[i] = append([]byte(nil), f.data...)
	}
	for len(p) >= 6 {
		i := int(p[0]) % len(out)
		off := int(binary.LittleEndian.Uint32(p[1:]))
		n := int(p[5])
		p = p[6:]
		b := out[i]
		if len(b) == 0 {
			continue
		}
		off %= len(b)
		if n == 0xff {
			out[i] = b[:off]
			continue
		}
		n = min(n%33, len(p))
		copy(b[off:], p[:n])
		p = p[n:]
	}
	return out
}

// writeBase writes b's files with contents data to a new directory and
// returns the arguments naming them there.
func writeBase(t *testing.T, b fuzzBase, data [][]byte, level int) []string {
	dir := t.TempDir()
	for i, f := range b.files {
		d := data[i]
		if f.gz {
			var z bytes.Buffer
			zw, _ := gzip.NewWriterLevel(&z, level)
			zw.Write(d)
			zw.Close()
			d = z.Bytes()
		}
		if err := os.WriteFile(filepath.Join(dir, f.name), d, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var args []string
	for _, a := range b.args {
		if !strings.HasPrefix(a, "-") && !filepath.IsAbs(a) {
			a = filepath.Join(dir, a)
		}
		args = append(args, a)
	}
	return args
}

// limitWriter fails once more than n bytes were written.
type limitWriter struct{ n int }

var errOutput = errors.New("output beyond the bound")

func (w *limitWriter) Write(b []byte) (int, error) {
	if len(b) > w.n {
		w.n = -1
		return 0, errOutput
	}
	w.n -= len(b)
	return len(b), nil
}

// maxFuzzOutput bounds what unwinddump prints for a fuzz input (the
// bases print at most 30 KB).
const maxFuzzOutput = 4 << 20

// FuzzMain runs unwinddump's main path (run) over a few edits of small
// shipped inputs of each kind it reads, in process: no panic, and output
// within a bound. The first byte picks the base, the rest are edits
// ([patch]), so inputs stay small and the parsing deep.
func FuzzMain(f *testing.F) {
	bases, err := fuzzBases()
	if err != nil {
		f.Fatal(err)
	}
	for i := range bases {
		f.Add([]byte{byte(i)})
	}
	f.Add([]byte{1, 0, 4, 0, 0, 0, 1, 1})          // vmcore: ELF class 1
	f.Add([]byte{3, 0, 0x20, 0, 0, 0, 0xff})       // capture: expected.json truncated
	f.Add([]byte{4, 1, 0x40, 0, 0, 0, 2, 0, 0x10}) // capture: the vmcore's e_phoff
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 || len(in) > 1<<10 {
			return
		}
		b := bases[int(in[0])%len(bases)]
		args := writeBase(t, b, patch(b.files, in[1:]), gzip.BestSpeed)
		w := &limitWriter{n: maxFuzzOutput}
		err := run(w, args)
		if w.n < 0 || errors.Is(err, errOutput) {
			t.Fatalf("more than %d bytes of output (%v)", maxFuzzOutput, err)
		}
	})
}

// The fuzz bases, unedited, are dumped without an error.
func TestFuzzBases(t *testing.T) {
	bases, err := fuzzBases()
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range bases {
		args := writeBase(t, b, patch(b.files, nil), gzip.DefaultCompression)
		var out bytes.Buffer
		err := run(&out, args)
		t.Logf("base %d %v: %d bytes out, %v", i, b.args, out.Len(), err)
		if err != nil || out.Len() == 0 {
			t.Errorf("base %d: %d bytes, %v", i, out.Len(), err)
		}
	}
}
