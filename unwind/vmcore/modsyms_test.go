package vmcore

import (
	"strings"
	"testing"
)

// TestKallsymsModuleColumn checks that /proc/kallsyms' and System.map's
// fourth column, "[module]" (as the guest of capture deb-6.1-mod printed
// it, tab-separated), names the symbol's module, and that a fourth
// field that is no [name] is refused.
func TestKallsymsModuleColumn(t *testing.T) {
	const text = "ffff800000be7000 t ukit_inner.constprop.0\t[ukit]\nffff800008000000 T _text\n"
	for _, parse := range []struct {
		name string
		f    func(string) ([]KSym, error)
	}{
		{"ParseKallsyms", func(s string) ([]KSym, error) { return ParseKallsyms(strings.NewReader(s)) }},
		{"ParseSystemMap", func(s string) ([]KSym, error) { return ParseSystemMap("map", strings.NewReader(s)) }},
	} {
		syms, err := parse.f(text)
		if err != nil {
			t.Fatalf("%s: %v", parse.name, err)
		}
		if len(syms) != 2 || syms[0].Name != "ukit_inner.constprop.0" || syms[0].Module != "ukit" || syms[1].Module != "" {
			t.Errorf("%s: %+v", parse.name, syms)
		}
		if _, err := parse.f("ffff800000be7000 t ukit_inner ukit\n"); err == nil {
			t.Errorf("%s: a fourth field without brackets was accepted", parse.name)
		}
	}
}
