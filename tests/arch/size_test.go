package arch

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// maxFileLines bounds a file of the product's code: one concern per file.
const maxFileLines = 700

// maxFuncLines bounds a function of the product's code, from its func
// line to its closing brace: a function a reader can hold at once.
const maxFuncLines = 80

// TestNoProductFileOverItsBound: no non-test Go file below pkg/ and cmd/
// is longer than maxFileLines.
func TestNoProductFileOverItsBound(t *testing.T) {
	productFiles(t, func(p string, b []byte) {
		if n := strings.Count(string(b), "\n"); n > maxFileLines {
			t.Errorf("%s has %d lines, more than %d: split it by concern", p, n, maxFileLines)
		}
	})
}

// maxMethods bounds the methods a type of the product's code declares:
// one owner per concept, each with a surface a reader can learn.
const maxMethods = 30

// TestNoProductTypeOverItsMethodBound: no type of the product's code
// declares more than maxMethods methods.
func TestNoProductTypeOverItsMethodBound(t *testing.T) {
	methods := map[string]int{} // "directory.Type"
	productFiles(t, func(p string, b []byte) {
		f, err := parser.ParseFile(token.NewFileSet(), p, b, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || len(fn.Recv.List) == 0 {
				continue
			}
			typ := fn.Recv.List[0].Type
			if star, ok := typ.(*ast.StarExpr); ok {
				typ = star.X
			}
			if ix, ok := typ.(*ast.IndexExpr); ok {
				typ = ix.X
			}
			if id, ok := typ.(*ast.Ident); ok {
				methods[filepath.Dir(p)+"."+id.Name]++
			}
		}
	})
	largest := ""
	for typ, n := range methods {
		if n > maxMethods {
			t.Errorf("%s declares %d methods, more than %d: give a concept of it a type of its own", typ, n, maxMethods)
		}
		if largest == "" || n > methods[largest] || n == methods[largest] && typ < largest {
			largest = typ
		}
	}
	t.Logf("the largest type: %s, %d methods", largest, methods[largest])
	if methods["pkg/provision.Area"] == 0 {
		t.Error("no methods of pkg/provision.Area were counted: the count is broken")
	}
}

// TestNoProductFunctionOverItsBound: no function or method of the
// product's code is longer than maxFuncLines.
func TestNoProductFunctionOverItsBound(t *testing.T) {
	productFiles(t, func(p string, b []byte) {
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, p, b, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			if n := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1; n > maxFuncLines {
				t.Errorf("%s: %s has %d lines, more than %d: split it into steps", p, fn.Name.Name, n, maxFuncLines)
			}
		}
	})
}

// productFiles calls each with the path (from the repository's root) and
// contents of every non-test Go file below pkg/ and cmd/.
func productFiles(t *testing.T, each func(p string, b []byte)) {
	for _, dir := range []string{"../../pkg", "../../cmd"} {
		err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			each(strings.TrimPrefix(p, "../../"), b)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
