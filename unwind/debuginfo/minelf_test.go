package debuginfo_test

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/unwindkit/unwindkit/unwind/debuginfo"
)

// debugOnly rewrites an ELF file to its header and its .debug_* sections
// alone (each section's bytes as stored, compressed or not): the small
// seeds of FuzzLookup.
func debugOnly(t testing.TB, data []byte) []byte {
	t.Helper()
	ef, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	type sec struct {
		hdr  elf.Section64
		name string
		body []byte
	}
	var secs []sec
	for _, s := range ef.Sections {
		if !strings.HasPrefix(s.Name, ".debug_") {
			continue
		}
		body := data[s.Offset : s.Offset+s.FileSize]
		secs = append(secs, sec{elf.Section64{Type: uint32(s.Type), Flags: uint64(s.Flags), Addralign: 1}, s.Name, body})
	}
	shstr := []byte{0}
	var out bytes.Buffer
	out.Write(make([]byte, 64)) // the ELF header, written last
	for i := range secs {
		secs[i].hdr.Name = uint32(len(shstr))
		shstr = append(append(shstr, secs[i].name...), 0)
		secs[i].hdr.Off = uint64(out.Len())
		secs[i].hdr.Size = uint64(len(secs[i].body))
		out.Write(secs[i].body)
	}
	strOff := out.Len()
	out.Write(shstr)
	for out.Len()%8 != 0 {
		out.WriteByte(0)
	}
	shoff := out.Len()
	le := binary.LittleEndian
	binary.Write(&out, le, elf.Section64{}) // SHN_UNDEF
	for _, s := range secs {
		binary.Write(&out, le, s.hdr)
	}
	binary.Write(&out, le, elf.Section64{Name: 0, Type: uint32(elf.SHT_STRTAB), Off: uint64(strOff), Size: uint64(len(shstr)), Addralign: 1})
	b := out.Bytes()
	h := elf.Header64{
		Type: uint16(elf.ET_EXEC), Machine: uint16(elf.EM_AARCH64), Version: 1,
		Shoff: uint64(shoff), Ehsize: 64, Shentsize: 64,
		Shnum: uint16(len(secs) + 2), Shstrndx: uint16(len(secs) + 1),
	}
	copy(h.Ident[:], "\x7fELF")
	h.Ident[elf.EI_CLASS], h.Ident[elf.EI_DATA], h.Ident[elf.EI_VERSION] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), 1
	var hb bytes.Buffer
	binary.Write(&hb, le, h)
	copy(b, hb.Bytes())
	return b
}

// TestDebugOnly: the seeds answer as their binaries do.
func TestDebugOnly(t *testing.T) {
	for _, bin := range binaries(t) {
		full := gunzip(t, bin)
		small := debugOnly(t, full)
		a, err1 := openBytes(t, full)
		b, err2 := openBytes(t, small)
		if err1 != nil || err2 != nil {
			t.Fatalf("%s: %v %v", bin, err1, err2)
		}
		n := 0
		for _, w := range parseA2L(t, string(gunzip(t, strings.TrimSuffix(bin, ".elf.gz")+".addr2line.gz"))) {
			fa, ea := a.Lookup(w.addr, debuginfo.PC)
			fb, eb := b.Lookup(w.addr, debuginfo.PC)
			if !equalFrames(fa, fb) || (ea == nil) != (eb == nil) {
				t.Fatalf("%s: %#x: %v %v vs %v %v", bin, w.addr, fa, ea, fb, eb)
			}
			n++
		}
		t.Logf("%s: %d bytes, debug sections only %d; %d addresses agree", bin, len(full), len(small), n)
	}
}
