package outside

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/unwindkit/unwindkit/internal/needs"
)

const module = "github.com/unwindkit/unwindkit"

// public reports whether an import path of this module names a public
// package: fault, ptrauth, percpu, scs, fp, depot, unwind and unwind's
// subpackages (none of them internal).
func public(path string) bool {
	rel, ok := strings.CutPrefix(path, module+"/")
	if !ok {
		return false
	}
	if strings.Contains("/"+rel+"/", "/internal/") {
		return false
	}
	switch top, _, _ := strings.Cut(rel, "/"); top {
	case "fault", "ptrauth", "percpu", "scs", "fp", "depot":
		return rel == top
	case "unwind":
		return true
	}
	return false
}

// goTool is the go command of the toolchain running this test.
func goTool(t testing.TB) string { return needs.Go(t) }

// publicPackages maps each public package of the checkout to the names of
// the internal packages it imports directly: the only internal names its
// go doc could show (an exported declaration names a package it imports).
// Matching on those alone keeps a public package of the same name
// (unwind/prologue, internal/prologue) from being taken for the internal
// one.
func publicPackages(t *testing.T) map[string][]string {
	t.Helper()
	out, err := exec.Command(goTool(t), "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) == 0 || !public(f[0]) {
			continue
		}
		names := []string{}
		for _, imp := range f[1:] {
			if strings.HasPrefix(imp, module+"/internal/") {
				names = append(names, regexp.QuoteMeta(imp[strings.LastIndex(imp, "/")+1:]))
			}
		}
		pkgs[f[0]] = names
	}
	if len(pkgs) < 10 {
		t.Fatalf("only %d public packages: %v", len(pkgs), pkgs)
	}
	return pkgs
}

// TestDocMentionsNoInternal: `go doc -all` of every public package names
// no identifier of an internal package (a user cannot see or name it) in
// a declaration: signatures, fields, alias targets, constant values. A
// re-exported error sentinel (var ErrX = errs.ErrX) is the one exception,
// as it is for the project's stop hook: its value is its identity.
func TestDocMentionsNoInternal(t *testing.T) {
	sentinel := regexp.MustCompile(`=\s*[a-z0-9]+\.Err[A-Za-z0-9]*\s*$`)
	for p, internals := range publicPackages(t) {
		if len(internals) == 0 {
			continue // it cannot mention what it does not import
		}
		mention := regexp.MustCompile(`\b(` + strings.Join(internals, "|") + `)\.[A-Z]`)
		out, err := exec.Command(goTool(t), "doc", "-all", p).CombinedOutput()
		if err != nil {
			t.Errorf("go doc -all %s: %v\n%s", p, err, out)
			continue
		}
		for line := range strings.Lines(string(out)) {
			line = strings.TrimRight(line, "\n")
			// Doc comment text is indented by four spaces; declarations
			// are not, or by a tab inside a struct or a group.
			if strings.HasPrefix(line, "    ") || strings.HasPrefix(strings.TrimSpace(line), "//") || sentinel.MatchString(line) {
				continue
			}
			if !mention.MatchString(line) {
				continue
			}
			t.Errorf("%s: go doc shows an internal identifier: %s", p, strings.TrimSpace(line))
		}
	}
}

// TestExamplesUsePublicAPI: every _test.go file of the repository that
// holds an Example function imports, of this module, public packages
// only: an Example is code a user copies from the documentation.
// An importable helper under examples/ (examples/kasan/slab) is not a
// public package, but its own Examples may import it.
func TestExamplesUsePublicAPI(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	files := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		var example string
		for _, obj := range f.Decls {
			if fn, ok := obj.(*ast.FuncDecl); ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Example") {
				example = fn.Name.Name
				break
			}
		}
		if example == "" {
			return nil
		}
		files++
		rel, _ := filepath.Rel(root, path)
		for _, imp := range f.Imports {
			p, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				return err
			}
			own := p == module+"/"+filepath.ToSlash(filepath.Dir(rel)) && strings.HasPrefix(rel, "examples"+string(filepath.Separator))
			if strings.HasPrefix(p, module+"/") && !public(p) && !own {
				t.Errorf("%s (%s) imports %s, which a user cannot import", rel, example, p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 8 {
		t.Fatalf("found Examples in %d files only: the walk missed the repository", files)
	}
	t.Logf("%d files with Examples", files)
}
