package lab

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Secret is a directory laid out as the kubelet lays out a Secret volume:
// each file is a link to ..data/NAME, and ..data a link to a directory of
// the current files, replaced in one rename when the Secret changes.
type Secret struct {
	Dir string
	n   int
}

// NewSecret makes a Secret volume of files at dir.
func NewSecret(t testing.TB, dir string, files map[string][]byte) *Secret {
	t.Helper()
	s := &Secret{Dir: dir}
	s.Update(t, files)
	return s
}

// Update replaces the Secret's files with files, as the kubelet does: a
// new directory, then ..data switched to it at once.
func (s *Secret) Update(t testing.TB, files map[string][]byte) {
	t.Helper()
	s.n++
	version := fmt.Sprintf("..v%d", s.n)
	if err := os.MkdirAll(filepath.Join(s.Dir, version), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(s.Dir, version, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tmp := filepath.Join(s.Dir, "..data_tmp")
	os.Remove(tmp)
	if err := os.Symlink(version, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(s.Dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for name := range files {
		link := filepath.Join(s.Dir, name)
		if _, err := os.Lstat(link); err != nil {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	if s.n > 1 {
		os.RemoveAll(filepath.Join(s.Dir, fmt.Sprintf("..v%d", s.n-1)))
	}
}

// ReadFile returns the contents of path, failing the test when it cannot
// be read: the files a Secret is made of.
func ReadFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
