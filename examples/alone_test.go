package examples

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEachProgramStandsAlone: every file that registers a program uses
// nothing declared in another file of the package (its tags, constants and
// helpers are its own), so that a reader can copy it into a module of their
// own and it compiles.
func TestEachProgramStandsAlone(t *testing.T) {
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	files := map[string]*ast.File{}
	declaredIn := map[string]string{} // package-level name → its file
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files[name] = f
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					declaredIn[d.Name.Name] = name
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						declaredIn[s.Name.Name] = name
					case *ast.ValueSpec:
						for _, n := range s.Names {
							declaredIn[n.Name] = name
						}
					}
				}
			}
		}
	}
	programs := 0
	for name, f := range files {
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(src), "task.RegisterProgram(") {
			continue
		}
		programs++
		for _, id := range f.Unresolved {
			if other, ok := declaredIn[id.Name]; ok && other != name {
				t.Errorf("%s: %s uses %s, declared in %s: keep a program's declarations in its own file", fset.Position(id.Pos()), name, id.Name, other)
			}
		}
	}
	if programs < 7 {
		t.Errorf("%d files register a program, want at least 7", programs)
	}
}
