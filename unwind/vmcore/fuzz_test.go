package vmcore

import (
	"bytes"
	"strings"
	"testing"
)

// trimmedSynth returns a small synthetic vmcore: what reading the stack and
// the kallsyms tables needs.
func trimmedSynth(t testing.TB, o synthOpts) []byte {
	s := newSynth(o)
	v, err := loadBytes(s.bytes())
	if err != nil {
		t.Fatal(err)
	}
	v.RecordReads(true)
	v.ReadVirt64(s.stackVA + stackSize - 16)
	v.Kallsyms()
	var out bytes.Buffer
	if err := v.WriteTrimmed(&out, v.PagesToRanges(v.PagesRead())); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// trimmedKcore is trimmedSynth laid out as /proc/kcore.
func trimmedKcore(t testing.TB) []byte {
	s := newSynth(synthOpts{pageShift: 12, vaBits: 48})
	v, err := loadBytes(s.kcoreOf(make([]byte, 64)))
	if err != nil {
		t.Fatal(err)
	}
	v.RecordReads(true)
	v.ReadVirt64(s.stackVA + stackSize - 16)
	v.Kallsyms()
	var out bytes.Buffer
	if err := v.WriteTrimmed(&out, v.PagesToRanges(v.PagesRead())); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func FuzzLoad(f *testing.F) {
	f.Add(trimmedSynth(f, synthOpts{pageShift: 12, vaBits: 48}))
	f.Add(trimmedKcore(f))
	f.Add(trimmedSynth(f, synthOpts{pageShift: 12, vaBits: 52, vaActual: 52, lpa2: true, ramBase: 0x000f_0000_4000_0000}))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := loadBytes(b)
		if err != nil {
			return
		}
		v.RecordReads(true)
		for _, c := range v.CPUs {
			v.ReadVirt64(c.Regs.SP)
			v.Translate(c.Regs.X[29])
		}
		if v.Virtual {
			v.ReadVirt64(v.PageOffset)
			v.ReadPhys64(v.Info.PhysOffset)
		}
		v.Kallsyms()
		var out bytes.Buffer
		if err := v.WriteTrimmed(&out, v.PagesToRanges(v.PagesRead())); err != nil {
			return
		}
		if _, err := loadBytes(out.Bytes()); err != nil {
			t.Fatalf("trimmed copy of a loadable vmcore does not load: %v", err)
		}
	})
}

// lookupNames are the names FuzzBTFLookup's types and members take.
var lookupNames = []string{"", "task_struct", "thread", "stack", "cpu_context", "pc", ""}

// genBTF makes BTF from a few fuzzed bytes: up to 8 types, each of one
// byte of kind and one of name, a struct or union with up to 3 members of
// two bytes (name, type id; ids beyond the types are dangling), other
// kinds one byte of the referenced type. Loops and dangling ids are what
// the bytes give.
func genBTF(in []byte) []byte {
	b := &btfBuilder{strs: []byte{0}}
	next := func() byte {
		if len(in) == 0 {
			return 0
		}
		c := in[0]
		in = in[1:]
		return c
	}
	for i := 0; i < 8 && len(in) > 0; i++ {
		k, nm := next(), lookupNames[int(next())%len(lookupNames)]
		ref := func() uint32 { return uint32(next() % 10) }
		switch k % 6 {
		case 0, 1:
			var ms [][]uint32
			for range int(k>>4) % 4 {
				ms = append(ms, b.member(lookupNames[int(next())%len(lookupNames)], ref(), 8*uint32(next())))
			}
			b.structType(nm, 64, false, ms...)
			if k%6 == 1 {
				le.PutUint32(b.types[len(b.types)-12*(len(ms)+1)+4:], uint32(btfUnion)<<24|uint32(len(ms)))
			}
		case 2:
			b.typ(nm, btfTypedef, false, 0, ref())
		case 3:
			b.typ("", btfConst, false, 0, ref())
		case 4:
			b.typ("", btfPtr, false, 0, ref())
		default:
			b.typ("long", btfInt, false, 0, 8, 64)
		}
	}
	return b.bytes()
}

// refMember is the lookup without pruning (what member did before it
// searched each type once): every descent to depth 8. With refLoops it
// defines the answer; the inputs keep both cheap (3 members: 3^9 descents
// at most).
func refMember(t *BTF, ty *btfType, name string, depth int) (uint64, uint32, bool, bool) {
	if depth > 8 {
		return 0, 0, false, false
	}
	for _, m := range ty.members {
		mn, _ := t.name(m.name)
		if mn == name {
			return uint64(m.bitOff), m.typ, m.bitSize != 0, true
		}
		if mn == "" {
			if in := t.resolve(m.typ); in != nil && (in.kind == btfStruct || in.kind == btfUnion) {
				if b, ty2, bf, ok := refMember(t, in, name, depth+1); ok {
					return uint64(m.bitOff) + b, ty2, bf, true
				}
			}
		}
	}
	return 0, 0, false, false
}

// refLoops reports whether ty reaches a cycle of anonymous members: a
// path of anonymous members longer than the number of types.
func refLoops(t *BTF, ty *btfType, depth int) bool {
	if depth > len(t.types) {
		return true
	}
	for _, m := range ty.members {
		if mn, _ := t.name(m.name); mn != "" {
			continue
		}
		if in := t.resolve(m.typ); in != nil && (in.kind == btfStruct || in.kind == btfUnion) && refLoops(t, in, depth+1) {
			return true
		}
	}
	return false
}

// FuzzBTFLookup: lookups over generated, often self-referential BTF answer
// what the exhaustive search answers, and "no member" in a struct that
// contains itself through anonymous members.
func FuzzBTFLookup(f *testing.F) {
	f.Add([]byte{0x30, 1, 0, 1, 0, 0, 1, 8, 3, 2, 0})             // task_struct{anon task_struct; anon task_struct; stack}
	f.Add([]byte{0x20, 1, 0, 2, 0, 4, 9, 2, 2, 1, 0x11, 0, 3, 5}) // through a typedef and a union
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) > 64 {
			return
		}
		btf, err := ParseBTF(genBTF(in))
		if err != nil {
			t.Fatalf("generated BTF: %v", err)
		}
		for _, path := range []string{"task_struct.stack", "task_struct.thread.pc", "task_struct.pc", "thread.stack", "cpu_context.pc", "task_struct.nope"} {
			got, err := btf.Offset(path)
			// The reference: Offset with refMember.
			parts := strings.Split(path, ".")
			ty := btf.structByName(parts[0])
			var want uint64
			ok := ty != nil
			for _, p := range parts[1:] {
				if !ok || ty == nil || (ty.kind != btfStruct && ty.kind != btfUnion) || refLoops(btf, ty, 0) {
					ok = false
					break
				}
				bits, mt, bf, found := refMember(btf, ty, p, 0)
				if !found || bits%8 != 0 || bf {
					ok = false
					break
				}
				want += bits / 8
				ty = btf.resolve(mt)
			}
			if (err == nil) != ok || ok && got != want {
				t.Fatalf("%s: %d, %v; the exhaustive search: %d, found %v", path, got, err, want, ok)
			}
		}
	})
}
