package main

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// writeVmlinux writes an arm64 ET_EXEC ELF whose .symtab holds the
// symbols of a capture's symbol file: functions (STT_FUNC) in an
// executable section, the rest (STT_OBJECT) in a writable one, as in a
// vmlinux (the sections hold no bytes: only the symbols are read).
func writeVmlinux(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := gunzipFile(filepath.Join(dir, "syms.txt.gz"))
	if err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	strtab := []byte{0}
	var symtab []byte
	symtab = append(symtab, make([]byte, 24)...) // the null symbol
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		a, err := strconv.ParseUint(f[0], 16, 64)
		if err != nil {
			t.Fatal(err)
		}
		typ, sec := elf.STT_OBJECT, uint16(2)
		if strings.ContainsAny(f[1], "tTwW") {
			typ, sec = elf.STT_FUNC, 1
		}
		bind := elf.STB_LOCAL
		if f[1][0] >= 'A' && f[1][0] <= 'Z' {
			bind = elf.STB_GLOBAL
		}
		e := make([]byte, 24)
		le.PutUint32(e, uint32(len(strtab)))
		e[4] = byte(bind)<<4 | byte(typ)
		le.PutUint16(e[6:], sec)
		le.PutUint64(e[8:], a)
		symtab = append(symtab, e...)
		strtab = append(append(strtab, f[2]...), 0)
	}
	// A mapping symbol, which the reader skips.
	e := make([]byte, 24)
	le.PutUint32(e, uint32(len(strtab)))
	le.PutUint16(e[6:], 1)
	symtab = append(symtab, e...)
	strtab = append(strtab, "$x\x00"...)
	shstr := []byte("\x00.text\x00.data\x00.symtab\x00.strtab\x00.shstrtab\x00")
	var out bytes.Buffer
	out.Write(make([]byte, 64))
	symOff := out.Len()
	out.Write(symtab)
	strOff := out.Len()
	out.Write(strtab)
	shstrOff := out.Len()
	out.Write(shstr)
	for out.Len()%8 != 0 {
		out.WriteByte(0)
	}
	shoff := out.Len()
	sh := func(name, typ uint32, flags, off, size uint64, link, info uint32, entsize uint64) {
		h := make([]byte, 64)
		le.PutUint32(h, name)
		le.PutUint32(h[4:], typ)
		le.PutUint64(h[8:], flags)
		le.PutUint64(h[24:], off)
		le.PutUint64(h[32:], size)
		le.PutUint32(h[40:], link)
		le.PutUint32(h[44:], info)
		le.PutUint64(h[48:], 8)
		le.PutUint64(h[56:], entsize)
		out.Write(h)
	}
	sh(0, 0, 0, 0, 0, 0, 0, 0)
	sh(1, uint32(elf.SHT_NOBITS), uint64(elf.SHF_ALLOC|elf.SHF_EXECINSTR), 0, 0x1000000, 0, 0, 0)
	sh(7, uint32(elf.SHT_NOBITS), uint64(elf.SHF_ALLOC|elf.SHF_WRITE), 0, 0x1000000, 0, 0, 0)
	sh(13, uint32(elf.SHT_SYMTAB), 0, uint64(symOff), uint64(len(symtab)), 4, 1, 24)
	sh(21, uint32(elf.SHT_STRTAB), 0, uint64(strOff), uint64(len(strtab)), 0, 0, 0)
	sh(29, uint32(elf.SHT_STRTAB), 0, uint64(shstrOff), uint64(len(shstr)), 0, 0, 0)
	h := out.Bytes()
	copy(h, "\x7fELF\x02\x01\x01")
	le.PutUint16(h[16:], uint16(elf.ET_EXEC))
	le.PutUint16(h[18:], uint16(elf.EM_AARCH64))
	le.PutUint32(h[20:], 1)
	le.PutUint64(h[40:], uint64(shoff))
	le.PutUint16(h[52:], 64)
	le.PutUint16(h[58:], 64)
	le.PutUint16(h[60:], 6)
	le.PutUint16(h[62:], 5)
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, h, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// A vmlinux as the symbol source of a stock dump: its .symtab's data
// symbols (read with elfsym's bounds) make every CPU and task unwind, as
// System.map does.
func TestStockDumpWithVmlinux(t *testing.T) {
	dir := td + "kernel/deb-6.12"
	ks, _ := stockKallsyms(t, dir)
	vml := writeVmlinux(t, dir, "vmlinux")
	if k, err := sniff(vml); err != nil || k != kindELF {
		t.Fatalf("vmlinux: %v %v", k, err)
	}
	out, errs, code := cmd(t, "-json", "-tasks", dir+"/t.vmcore.gz", ks, vml, "-btf", dir+"/l-syscall.vmcore.gz")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	d := decode(t, out)
	if !strings.Contains(fmt.Sprint(d.Notes), vml+" (vmlinux)") || !strings.Contains(fmt.Sprint(d.Notes), "data symbols added from "+vml) {
		t.Errorf("notes %q", d.Notes)
	}
	if same, blocked := blockedTasks(t, "deb-6.12", d); same != 55 || blocked != 55 {
		t.Errorf("%d of %d blocked tasks match", same, blocked)
	}
	for _, s := range d.Stacks {
		if s.Kind == "cpu" && (len(s.FP.Frames) == 0 || strings.Contains(fmt.Sprint(s.Notes), "GUESS")) {
			t.Errorf("cpu %d: %+v", s.CPU, s)
		}
	}
	// The vmlinux alone names every frame too.
	out, errs, code = cmd(t, "-json", "-cpu", "1", dir+"/t.vmcore.gz", vml, "-btf", dir+"/l-syscall.vmcore.gz")
	if code != 0 {
		t.Fatalf("vmlinux alone: exit %d: %s", code, errs)
	}
	if s := decode(t, out).Stacks[0]; len(s.FP.Frames) != 15 || s.FP.Frames[14].Printed != "el0t_64_sync+0x190/0x198" {
		t.Errorf("vmlinux alone: %q", printedOf(s.FP))
	}
}
