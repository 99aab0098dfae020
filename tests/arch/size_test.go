package arch

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// maxFileLines bounds a file of the product's code: one concern per file.
const maxFileLines = 700

// TestNoProductFileOverItsBound: no non-test Go file below pkg/ and cmd/
// is longer than maxFileLines.
func TestNoProductFileOverItsBound(t *testing.T) {
	for _, dir := range []string{"../../pkg", "../../cmd"} {
		err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if n := strings.Count(string(b), "\n"); n > maxFileLines {
				t.Errorf("%s has %d lines, more than %d: split it by concern", strings.TrimPrefix(p, "../../"), n, maxFileLines)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
