package fp_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// outsideMain is a program of another module: it can import only the
// public packages, so it compiles only if fp's API names no internal type.
// It builds a task stack as bytes it owns and walks it.
const outsideMain = `package main

import (
	"encoding/binary"
	"fmt"

	"github.com/unwindkit/unwindkit/fp"
)

func main() {
	const low = 0x7fff0000
	data := make([]byte, fp.TaskStackSize)
	put := func(addr, v uint64) { binary.LittleEndian.PutUint64(data[addr-low:], v) }
	high := uint64(low + fp.TaskStackSize)
	regs := fp.TaskPtRegsAddr(high)
	put(regs+fp.PtRegsStackFrameOff+fp.MetaTypeOff, fp.MetaFinal)
	x29 := regs + fp.PtRegsStackFrameOff
	for i := uint64(1); i <= 3; i++ {
		sp := x29 - 64
		put(sp, x29)
		put(sp+8, 0x400000+i)
		x29 = sp
	}
	cfg := &fp.Config{
		Stacks:     []fp.Stack{{Kind: fp.Task, Low: low, High: high, Data: data}},
		FP:         x29,
		PC:         0x400000,
		TaskPtRegs: regs,
		Reliable:   true,
	}
	store := make([]uint64, 8)
	n, end, err := fp.SaveEnd(cfg, store, 0)
	fmt.Println(n, end, err, store[:n])
}
`

// TestOutsideModule builds and runs outsideMain in a module of its own in a
// temporary directory, with a replace pointing at this checkout.
func TestOutsideModule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a separate module")
	}
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go") // the toolchain running this test
	if _, err := os.Stat(goTool); err != nil {
		if goTool, err = exec.LookPath("go"); err != nil {
			t.Skip("no go tool")
		}
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"go.mod": "module example.com/outside\n\ngo 1.26.0\n\nrequire github.com/unwindkit/unwindkit v0.0.0\n\n" +
			"replace github.com/unwindkit/unwindkit => " + root + "\n",
		"go.sum":  string(sum),
		"main.go": outsideMain,
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(goTool, "run", "-mod=mod", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GOPROXY=off", "GOWORK=off")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("outside module: %v\n%s", err, out)
	}
	if got, want := strings.TrimSpace(string(out)), "4 final <nil> [4194304 4194307 4194306 4194305]"; got != want {
		t.Fatalf("outside module printed %q, want %q", got, want)
	}
}
