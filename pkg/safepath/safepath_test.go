package safepath

import (
	"path"
	"reflect"
	"strings"
	"testing"
)

func TestCheckVolumePath(t *testing.T) {
	good := []string{"pvc-1", "ns/pvc-1", "a/b/c", "with space", "%2e%2e", "a..b", "...", ".hidden", "ünïcode", strings.Repeat("x", 255)}
	for _, p := range good {
		if err := CheckVolumePath(p); err != nil {
			t.Errorf("CheckVolumePath(%q) = %v, want nil", p, err)
		}
	}
	bad := map[string]string{
		"":                             "empty",
		".":                            "share root",
		"/":                            "share root",
		"./":                           "share root",
		"//":                           "share root",
		"..":                           "share root",
		"../x":                         `".." segments`,
		"a/../b":                       `".." segments`,
		"a/..":                         "share root",
		"./a":                          `"." segments`,
		"a/./b":                        `"." segments`,
		"/abs":                         "absolute",
		"a//b":                         "empty path segment",
		"a/":                           "empty path segment",
		"a\x00b":                       "control character",
		"a\nb":                         "control character",
		".nfsdir":                      "metadata area",
		".nfsdir/trash/x":              "metadata area",
		strings.Repeat("x", 256):       "exceeds 255",
		strings.Repeat("a/", 17) + "a": "levels",
		strings.Repeat(strings.Repeat("y", 200)+"/", 6) + "z": "bytes long",
	}
	for p, want := range bad {
		err := CheckVolumePath(p)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckVolumePath(%q) = %v, want error containing %q", p, err, want)
		}
	}
}

func TestIsWithin(t *testing.T) {
	if !IsWithin("a/b", "a") || !IsWithin("a", "a") || IsWithin("ab", "a") || IsWithin("a/bc", "a/b") {
		t.Error("IsWithin is wrong")
	}
}

func TestArchiveName(t *testing.T) {
	if got := ArchiveName("ns/pvc", 0); got != "archived-ns-pvc" {
		t.Errorf("got %q", got)
	}
	if got := ArchiveName("pvc", 2); got != "archived-pvc-2" {
		t.Errorf("got %q", got)
	}
	long := strings.Repeat("a", 250) + "/" + strings.Repeat("b", 250)
	n0, n1 := ArchiveName(long, 0), ArchiveName(long, 1)
	if len(n0) > MaxSegment || len(n1) > MaxSegment || n0 == n1 || CheckVolumePath(n0) != nil {
		t.Errorf("long archive names %q %q", n0, n1)
	}
}

func TestParents(t *testing.T) {
	if got := Parents("a/b/c"); !reflect.DeepEqual(got, []string{"a/b", "a"}) {
		t.Errorf("Parents = %v", got)
	}
	if got := Parents("a"); got != nil {
		t.Errorf("Parents(a) = %v", got)
	}
}

// FuzzCheckVolumePath asserts the invariant every caller relies on: a path
// that passes never escapes the share when joined below it, never names the
// share root or the metadata area.
func FuzzCheckVolumePath(f *testing.F) {
	for _, s := range []string{"a", "a/b", "../a", "a/../../b", "/etc", ".", "", ".nfsdir/x", "a\x00", "a//b", "..\\..", "%2e%2e/%2f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if CheckVolumePath(p) != nil {
			return
		}
		const share = "/share"
		joined := share + "/" + p
		clean := path.Join(share, p)
		if clean != joined {
			t.Fatalf("accepted %q is not clean: %q vs %q", p, clean, joined)
		}
		if clean == share || !strings.HasPrefix(clean, share+"/") {
			t.Fatalf("accepted %q escapes: %q", p, clean)
		}
		if strings.HasPrefix(clean, share+"/"+MetaDir+"/") || clean == share+"/"+MetaDir {
			t.Fatalf("accepted %q enters the metadata area", p)
		}
	})
}

func TestArchiveEntry(t *testing.T) {
	for name, want := range map[string]string{"./a/b": "a/b", "/etc/passwd": "etc/passwd", "a//b/./c/": "a/b/c", "./": ".", "": ".", "..": "", "a/../b": "", "../../x": ""} {
		got, ok := ArchiveEntry(name)
		if (want == "") == ok || got != want {
			t.Errorf("ArchiveEntry(%q) = %q, %v; want %q", name, got, ok, want)
		}
	}
}

func FuzzArchiveEntry(f *testing.F) {
	for _, s := range []string{"./a/b", "/abs", "../x", "a/../../b", "a//b", "./", "x/./y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		p, ok := ArchiveEntry(name)
		if !ok {
			return
		}
		if p == "." {
			return
		}
		if strings.HasPrefix(p, "/") || path.Clean(p) != p {
			t.Fatalf("ArchiveEntry(%q) = %q: not clean and relative", name, p)
		}
		for _, s := range strings.Split(p, "/") {
			if s == ".." || s == "." || s == "" {
				t.Fatalf("ArchiveEntry(%q) = %q has segment %q", name, p, s)
			}
		}
	})
}
