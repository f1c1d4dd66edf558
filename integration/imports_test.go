package integration

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestProductDoesNotImportIntegration: integration/ tests the product and
// the product never imports it: no package outside integration/, tests
// included, imports one inside it.
func TestProductDoesNotImportIntegration(t *testing.T) {
	const harness = "github.com/dpvm/dpvm/integration"
	root := ".."
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (n == "integration" && filepath.Dir(path) == root || n == "testdata" || strings.HasPrefix(n, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		files++
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == harness || strings.HasPrefix(p, harness+"/") {
				t.Errorf("%s imports %s: the product must not import its test harness", path, p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("only %d Go files outside integration/", files)
	}
}
