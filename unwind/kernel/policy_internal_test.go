package kernel

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/unwindkit/unwindkit/internal/arm64"
	"github.com/unwindkit/unwindkit/scs"
	"github.com/unwindkit/unwindkit/unwind/vmcore"
)

// perCPUCode is call_on_irq_stack's start with the seed's per-CPU policy
// at a: str_this_cpu of x18 into the variable at v.
func perCPUCode(t testing.TB, a, v uint64) []uint32 {
	t.Helper()
	adrp, err := arm64.Adrp(arm64.X16, a+4, v)
	if err != nil {
		t.Fatal(err)
	}
	return []uint32{arm64.BTIC, adrp, arm64.AddImm(arm64.X16, arm64.X16, uint32(v&0xfff)), arm64.MrsTPIDREL1(17),
		arm64.StrReg(arm64.X18, arm64.X16, 17), arm64.NOP, arm64.NOP, arm64.NOP}
}

// TestX18PolicyFromCode checks that each of the three policies is
// recognised from synthetic call_on_irq_stack code, and that code that
// stores x18 in none of their ways, or contradicts the BTF or the
// symbols, is an error (it was thread_info).
func TestX18PolicyFromCode(t *testing.T) {
	const a, v = 0xffff800008016000, 0xffff800009a31068
	k := &Kernel{V: &vmcore.Vmcore{Path: "synthetic"}, sym: map[string]uint64{"call_on_irq_stack": a},
		off: map[string]uint64{"thread_info.scs_sp": 24, "task_struct.thread_info": 0}}
	enc := func(ws ...uint32) []byte {
		b := make([]byte, 4*len(ws))
		for i, w := range ws {
			binary.LittleEndian.PutUint32(b[4*i:], w)
		}
		return b
	}
	per := perCPUCode(t, a, v)
	for _, c := range []struct {
		name string
		code []byte
		sym  uint64 // irq_shadow_call_stack_saved_ptr, if set
		want scs.Policy
		bad  string // the error says this
	}{
		{"thread_info", enc(arm64.BTIC, arm64.MrsSPEL0(arm64.X16), arm64.StrImm(arm64.X18, arm64.X16, 24), arm64.BLR(1)), 0, scs.ThreadInfo, ""},
		{"on-stack", enc(arm64.BTIC, arm64.StpPre(arm64.X18, 31, arm64.SP, -16), arm64.BLR(1)), 0, scs.OnStack, ""},
		{"per-cpu", enc(per...), 0, scs.PerCPU, ""},
		{"per-cpu with its symbol", enc(per...), v, scs.PerCPU, ""},
		{"per-cpu, other symbol", enc(per...), v + 8, 0, "irq_shadow_call_stack_saved_ptr is at"},
		{"thread_info at another offset", enc(arm64.MrsSPEL0(arm64.X16), arm64.StrImm(arm64.X18, arm64.X16, 32)), 0, 0, "thread_info.scs_sp is at 24"},
		{"x18 into an unknown base", enc(arm64.StrImm(arm64.X18, arm64.X16, 24)), 0, 0, "into no known place"},
		{"x18 into an unknown register pair", enc(arm64.StrReg(arm64.X18, arm64.X16, 17)), 0, 0, "into no known place"},
		{"call before any save", enc(arm64.BTIC, arm64.MrsSPEL0(arm64.X16), arm64.BLR(1), arm64.StrImm(arm64.X18, arm64.X16, 24)), 0, 0, "blr before any recognised store"},
		{"no save", enc(arm64.NOP, arm64.NOP), 0, 0, "no recognised store of x18"},
	} {
		delete(k.sym, "irq_shadow_call_stack_saved_ptr")
		if c.sym != 0 {
			k.sym["irq_shadow_call_stack_saved_ptr"] = c.sym
		}
		got, err := k.x18Policy(a, c.code)
		switch {
		case c.bad != "":
			if err == nil || !strings.Contains(err.Error(), c.bad) {
				t.Errorf("%s: %+v, %v; want an error saying %q", c.name, got, err, c.bad)
			}
		case err != nil || got.Policy != c.want || got.Why == "" || (c.want == scs.PerCPU) != (got.Var == v):
			t.Errorf("%s: %+v, %v; want %v", c.name, got, err, c.want)
		}
	}
}

// FuzzX18Policy checks the policy recognition on arbitrary code: no
// panic, and a recognised policy says which instructions decided it.
func FuzzX18Policy(f *testing.F) {
	const a = 0xffff800008016000
	var seed []byte
	for _, w := range perCPUCode(f, a, 0xffff800009a31068) {
		seed = binary.LittleEndian.AppendUint32(seed, w)
	}
	f.Add(seed)
	f.Add([]byte{0xf2, 0x7f, 0xbf, 0xa9})
	k := &Kernel{V: &vmcore.Vmcore{Path: "fuzz"}, sym: map[string]uint64{"call_on_irq_stack": a},
		off: map[string]uint64{"thread_info.scs_sp": 24, "task_struct.thread_info": 0}}
	f.Fuzz(func(t *testing.T, code []byte) {
		if len(code) > policyScan {
			code = code[:policyScan]
		}
		p, err := k.x18Policy(a, code)
		if err == nil && (p.Why == "" || p.Policy == scs.PolicyUnknown || p.Policy > scs.PerCPU || (p.Policy == scs.PerCPU) != (p.Var != 0)) {
			t.Fatalf("%+v", p)
		}
	})
}
