package prologue

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/unwindkit/unwindkit/internal/prologue"
)

// TestFuncShapeMirrorsScanner checks that FuncShape has every field of the
// scanner's result and that shape copies each one: a field the scanner
// gains must be added here too.
func TestFuncShapeMirrorsScanner(t *testing.T) {
	var in prologue.Func
	v := reflect.ValueOf(&in).Elem()
	for i := 0; i < v.NumField(); i++ {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString("f" + v.Type().Field(i).Name)
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Int, reflect.Int64:
			f.SetInt(int64(i + 2))
		case reflect.Uint8, reflect.Uint64:
			f.SetUint(uint64(i%2 + 1))
		default:
			t.Fatalf("field %s: kind %v not handled", v.Type().Field(i).Name, f.Kind())
		}
	}
	out := reflect.ValueOf(shape(in))
	if out.NumField() != v.NumField() {
		t.Fatalf("FuncShape has %d fields, the scanner's Func %d", out.NumField(), v.NumField())
	}
	for i := 0; i < v.NumField(); i++ {
		name := v.Type().Field(i).Name
		o := out.FieldByName(name)
		if !o.IsValid() {
			t.Errorf("FuncShape lacks %s", name)
			continue
		}
		if o.Kind() != v.Field(i).Kind() || fmt.Sprint(o.Interface()) != fmt.Sprint(v.Field(i).Interface()) {
			t.Errorf("%s: scanner %v, FuncShape %v", name, v.Field(i).Interface(), o.Interface())
		}
	}
	if shape(in).Leaf() != in.Leaf() {
		t.Errorf("Leaf: %v, scanner %v", shape(in).Leaf(), in.Leaf())
	}
	for _, k := range []prologue.Key{prologue.KeyNone, prologue.KeyA, prologue.KeyB} {
		if Key(k).String() != k.String() {
			t.Errorf("Key %d: %q, scanner %q", k, Key(k), k)
		}
	}
}

// TestBinaryOverCommittedELF scans a committed binary through the public
// types and checks a return address in it follows a call.
func TestBinaryOverCommittedELF(t *testing.T) {
	b, err := OpenBinary("../../testdata/arm64/bin/clang-pacret.elf")
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Funcs()) == 0 {
		t.Fatal("no functions")
	}
	var calls int
	for _, f := range b.Funcs() {
		g, ok := b.Func(f.Name)
		if !ok || g.Name != f.Name {
			t.Errorf("Func(%q) = %+v, %v; Funcs has %+v", f.Name, g, ok, f)
		}
		if at, ok := b.FuncAt(f.Addr); f.Size > 0 && (!ok || at.Addr > f.Addr) {
			t.Errorf("FuncAt(%#x) = %+v, %v", f.Addr, at, ok)
		}
		if f.Calls == 0 || f.Size < 8 {
			continue
		}
		for pc := f.Addr; pc < f.Addr+f.Size; pc += 4 {
			cs, err := b.CallBefore(pc + 4)
			if err != nil {
				t.Fatalf("CallBefore(%#x): %v", pc+4, err)
			}
			if cs.Call {
				calls++
				if cs.Func != f.Name && cs.Func == "" {
					t.Errorf("call at %#x in %s: Func %q", pc, f.Name, cs.Func)
				}
				if cs.Insn == "" {
					t.Errorf("call at %#x: no instruction text", pc)
				}
			}
		}
	}
	if calls == 0 {
		t.Error("no call found before any return address")
	}
	if _, err := b.CallBefore(3); err == nil {
		t.Error("CallBefore(3): no error for a misaligned address")
	}
}
