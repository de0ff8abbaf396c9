package machine

import (
	"encoding/binary"
	"testing"

	"github.com/unwindkit/unwindkit/unwind/prologue"
)

// TestTextScansAsDeclared runs the prologue scanner (which was written
// against real clang and GCC output) over every function the machine
// emitted, and checks it finds exactly the declared shape: the model's
// prologues are the ones real compilers produce, decodable by arm64asm.
func TestTextScansAsDeclared(t *testing.T) {
	for _, mod := range []func(*Config){
		nil,
		func(c *Config) { c.PAC = true },
		func(c *Config) { c.PAC, c.FGraph = true, true },
		func(c *Config) { c.SCS = false },
	} {
		m, _ := newTestMachine(t, mod)
		for _, f := range m.text.fns {
			code := make([]byte, f.size)
			for off := uint64(0); off < f.size; off += 4 {
				w, ok := m.text.region.Load32(f.addr + off)
				if !ok {
					t.Fatalf("%s: text not readable at %#x", f.spec.Name, f.addr+off)
				}
				binary.LittleEndian.PutUint32(code[off:], w)
			}
			got := prologue.ScanCode(f.spec.Name, f.addr, code)
			if got.Unknown != 0 {
				t.Errorf("%s: %d undecodable words", f.spec.Name, got.Unknown)
			}
			if got.SCSPush != f.scs || got.SCSPop != f.scs {
				t.Errorf("%s: scanner SCS push/pop %v/%v, declared %v", f.spec.Name, got.SCSPush, got.SCSPop, f.scs)
			}
			if (got.Sign != 0) != f.pac || (got.Auth != 0) != f.pac {
				t.Errorf("%s: scanner sign/auth %v/%v, declared pac %v", f.spec.Name, got.Sign, got.Auth, f.pac)
			}
			if f.pac && f.scs && !got.SignBeforePush {
				t.Errorf("%s: paciasp not before the SCS push", f.spec.Name)
			}
			if got.FrameRecord != f.frame {
				t.Errorf("%s: scanner frame record %v, declared %v", f.spec.Name, got.FrameRecord, f.frame)
			}
			wantCalls := len(f.sites)
			if f.blr != 0 {
				wantCalls++
			}
			if got.Calls != wantCalls {
				t.Errorf("%s: scanner found %d calls, text has %d call sites", f.spec.Name, got.Calls, wantCalls)
			}
			if m.cfg.FGraph && f.kind == kindC && got.EntryNOPs != 2 {
				t.Errorf("%s: %d patchable entry NOPs, want 2", f.spec.Name, got.EntryNOPs)
			}
		}
	}
}
