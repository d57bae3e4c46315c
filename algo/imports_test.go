package algo_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImports enforces the layering rule: algo imports, of Braid, only
// sched and cost.
func TestImports(t *testing.T) {
	const module = "github.com/braid-ccl/braid/"
	allowed := map[string]bool{module + "sched": true, module + "cost": true}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		ast, err := parser.ParseFile(token.NewFileSet(), f, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range ast.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasPrefix(path, module) && !allowed[path] {
				t.Errorf("%s imports %s; algo may import only sched and cost", f, path)
			}
		}
	}
}
