package fault

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

func TestErrors(t *testing.T) {
	err := fmt.Errorf("ctx: %w", &CorruptError{Rule: RuleMisalignedFP, Addr: 0x1003, Detail: "in task stack"})
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.Rule != "misaligned fp" || ce.Addr != 0x1003 || !errors.Is(err, ErrCorrupt) {
		t.Fatalf("errors.As gave %+v, Is(ErrCorrupt) %v", ce, errors.Is(err, ErrCorrupt))
	}
	if got, want := ce.Error(), "unwindkit: corrupt state: misaligned fp at 0x1003: in task stack"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	if got, want := (&CorruptError{Rule: RuleSCSOverflow, Addr: 0x10}).Error(), "unwindkit: corrupt state: scs overflow at 0x10"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(ErrNotSupported, syscall.ENOSYS) || errors.Is(ErrCorrupt, syscall.ENOSYS) || errors.Is(ErrUnreliable, ErrCorrupt) {
		t.Fatal("sentinels match the wrong errors")
	}
}

// rules returns the Rule constants of rules.go: name to value.
func rules(t *testing.T) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "rules.go", nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			for i, n := range vs.Names {
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					t.Fatalf("%s is not a string literal", n.Name)
				}
				v, _ := strconv.Unquote(lit.Value)
				out[n.Name] = v
			}
		}
	}
	return out
}

// TestRulesSpelledOnce: the list is the one place each rule's string is
// written. Every value is distinct; no library file of the module (tests
// aside) writes a rule's string as a literal; and no corruption error is
// made with a literal rule (errs.Corrupt, errs.Corruptf, a CorruptError
// literal's Rule field), so every rule a package checks is in the list.
func TestRulesSpelledOnce(t *testing.T) {
	list := rules(t)
	if len(list) < 35 {
		t.Fatalf("only %d rules parsed from rules.go", len(list))
	}
	byValue := map[string]string{}
	for name, v := range list {
		if other, dup := byValue[v]; dup {
			t.Errorf("%s and %s are both %q", name, other, v)
		}
		byValue[v] = name
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	self, _ := filepath.Abs("rules.go")
	files, calls := 0, 0
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
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || path == self {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		literal := func(e ast.Expr, what string) {
			if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				t.Errorf("%s: %s with the literal rule %s: add it to package fault's list", fset.Position(lit.Pos()).String()[len(root)+1:], what, lit.Value)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.BasicLit:
				if n.Kind != token.STRING {
					break
				}
				if v, err := strconv.Unquote(n.Value); err == nil {
					if name, ok := byValue[v]; ok {
						t.Errorf("%s: spells %q again: use fault.%s", fset.Position(n.Pos()).String()[len(root)+1:], v, name)
					}
				}
			case *ast.CallExpr:
				if sel, ok := n.Fun.(*ast.SelectorExpr); ok && (sel.Sel.Name == "Corrupt" || sel.Sel.Name == "Corruptf") && len(n.Args) > 0 {
					calls++
					literal(n.Args[0], "errs."+sel.Sel.Name)
				}
			case *ast.KeyValueExpr:
				if k, ok := n.Key.(*ast.Ident); ok && k.Name == "Rule" {
					literal(n.Value, "a CorruptError")
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 || calls < 40 {
		t.Fatalf("walked %d files and %d Corrupt calls only: the walk missed the module", files, calls)
	}
	t.Logf("%d rules, %d files, %d Corrupt calls", len(list), files, calls)
}
