package unwind_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// layers is the layering DESIGN.md and this package's doc draw, written
// once: for each package of the module (a path ending in "/..." is the
// packages under it), the module's packages it may import directly. The
// first entry that matches a package is its rule; every package must
// match one, so a new package has to be placed in the drawing.
var layers = []struct {
	pkg string
	may []string
}{
	{"fault", nil}, // the shared errors: the standard library only
	{"ptrauth", []string{"fault", "internal/..."}},
	{"percpu", []string{"fault", "internal/..."}},
	{"scs", []string{"fault", "internal/...", "ptrauth", "percpu", "fp"}}, // fp: the one vocabulary (Origin)
	{"fp", []string{"fault", "internal/...", "ptrauth"}},
	{"depot", []string{"fault", "internal/..."}},
	{"unwind", []string{"fault", "internal/...", "ptrauth", "scs", "fp", "depot"}},
	// The one sibling import: unwind/kernel reads its dump through
	// unwind/vmcore.
	{"unwind/kernel", []string{"fault", "internal/...", "ptrauth", "percpu", "scs", "fp", "depot", "unwind", "unwind/vmcore"}},
	// The Guarded Control Stack: below the front door's vocabulary only.
	{"unwind/gcs", []string{"fault", "internal/...", "fp"}},
	{"unwind/...", []string{"fault", "internal/...", "ptrauth", "percpu", "scs", "fp", "depot", "unwind"}},
	// The benchmarks' shared bodies drive the products they measure.
	{"internal/benchbody", []string{"fault", "internal/...", "ptrauth", "percpu", "scs", "fp", "depot", "unwind", "unwind/..."}},
	// The reader of testdata/kernel's capture fixtures, for the module's
	// tests and tools: it opens a capture's dumps with unwind/kernel.
	{"internal/kcapture", []string{"fault", "internal/...", "unwind", "unwind/kernel", "unwind/vmcore"}},
	// The live runs' comparison rules (testdata/kernel/kcore-*), shared by
	// the guest program and the tests: they judge unwind/kernel's walks.
	{"internal/kcorecheck", []string{"unwind/kernel"}},
	{"internal/...", []string{"fault", "internal/...", "ptrauth", "percpu"}},
	{"examples/...", []string{"..."}}, // programs: anything of the module
}

// match reports whether the module-relative path rel is pattern or, for a
// pattern ending in "/...", under it ("..." alone matches everything).
func match(pattern, rel string) bool {
	if pattern == "..." {
		return true
	}
	if dir, ok := strings.CutSuffix(pattern, "/..."); ok {
		return strings.HasPrefix(rel, dir+"/")
	}
	return rel == pattern
}

// imports returns, for every package of the module, the module's packages
// it imports directly (go list's Imports, module-relative).
func imports(t *testing.T) map[string][]string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out, err := exec.Command(gobin, "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		rel, ok := strings.CutPrefix(f[0], module+"/")
		if !ok {
			continue
		}
		deps := []string{}
		for _, imp := range f[1:] {
			if r, ok := strings.CutPrefix(imp, module+"/"); ok {
				deps = append(deps, r)
			}
		}
		pkgs[rel] = deps
	}
	if len(pkgs) < 30 {
		t.Fatalf("go list found %d packages of the module only", len(pkgs))
	}
	return pkgs
}

// TestLayering fails when an import of the module differs from the
// layering the docs draw: each package's direct imports (go list) against
// layers, and the drawing of unwind's subpackages in doc.go, arrow by
// arrow, against the public packages each imports.
func TestLayering(t *testing.T) {
	pkgs := imports(t)
	for rel, deps := range pkgs {
		i := slices.IndexFunc(layers, func(l struct {
			pkg string
			may []string
		}) bool {
			return match(l.pkg, rel)
		})
		if i < 0 {
			t.Errorf("%s is in no layer of the drawing", rel)
			continue
		}
		for _, d := range deps {
			if !slices.ContainsFunc(layers[i].may, func(p string) bool { return match(p, d) }) {
				t.Errorf("%s imports %s, which the layering does not allow (%s may import %v)", rel, d, layers[i].pkg, layers[i].may)
			}
		}
	}

	// The drawing in doc.go: "//	unwind/x   → a, b   what it is".
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	arrow := regexp.MustCompile(`(?m)^//\t(unwind(?:/[a-z]+)*)\s+→ (.+?)\s{2,}\S`)
	drawn := map[string]bool{}
	for _, m := range arrow.FindAllStringSubmatch(string(doc), -1) {
		rel, list := m[1], m[2]
		drawn[rel] = true
		want := []string{}
		if list != "(internal only)" {
			want = strings.Split(list, ", ")
		}
		deps, ok := pkgs[rel]
		if !ok {
			t.Errorf("doc.go draws %s, which go list does not know", rel)
			continue
		}
		got := []string{}
		for _, d := range deps {
			if d != "fault" && !strings.HasPrefix(d, "internal/") {
				got = append(got, d)
			}
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("doc.go draws %s → %v; it imports %v", rel, want, got)
		}
	}
	for rel := range pkgs {
		if match("unwind", rel) || match("unwind/...", rel) {
			if !drawn[rel] {
				t.Errorf("doc.go's drawing does not list %s", rel)
			}
		}
	}
	if len(drawn) < 8 {
		t.Errorf("doc.go draws %d packages: %v", len(drawn), drawn)
	}
}
