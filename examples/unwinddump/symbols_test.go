package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/unwindkit/unwindkit/unwind/vmcore"
)

// relocate moves link-time symbols by KERNELOFFSET when swapper_pg_dir
// says they are link-time, keeps run-time ones, and says when it guessed.
func TestRelocate(t *testing.T) {
	const off uint64 = 0x1230000
	const link uint64 = 0xffff80000938f000
	v := &vmcore.Vmcore{Path: "v", Info: vmcore.Info{KernelOffset: off, Raw: map[string]string{
		"SYMBOL(swapper_pg_dir)": fmt.Sprintf("%x", link+off)}}}
	if a, ok := v.Info.Symbol("swapper_pg_dir"); !ok || a != link+off {
		t.Fatalf("VMCOREINFO symbol %#x %v", a, ok)
	}
	mk := func(swapper uint64) *symSource {
		return &symSource{name: "System.map", what: "symbol map", linkTime: true, syms: []vmcore.KSym{
			{Name: "_text", Addr: 0xffff800008000000, Type: 'T'}, {Name: "swapper_pg_dir", Addr: swapper, Type: 'T'}, {Name: "abs", Addr: 0x10, Type: 'A'}}}
	}
	s := mk(link)
	if n := relocate(v, s); !strings.Contains(n, "moved by KERNELOFFSET 0x1230000 (swapper_pg_dir + it agrees") ||
		s.syms[1].Addr != 0xffff800008000000+off || s.syms[0].Addr != 0x10 || s.shift != off {
		t.Errorf("link-time: %s %+v", n, s.syms)
	}
	s = mk(link + off)
	if n := relocate(v, s); !strings.Contains(n, "at run-time addresses") || s.syms[1].Addr != link+off || s.shift != 0 {
		t.Errorf("run-time: %s %+v", n, s.syms)
	}
	s = mk(link)
	s.syms = s.syms[:1]
	if n := relocate(v, s); !strings.Contains(n, "a guess") {
		t.Errorf("no swapper_pg_dir: %s", n)
	}
	v.Info.KernelOffset = 0
	if n := relocate(v, mk(link)); !strings.Contains(n, "KERNELOFFSET 0") {
		t.Errorf("no offset: %s", n)
	}
}
