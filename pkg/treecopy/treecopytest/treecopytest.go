// Package treecopytest compares two trees entry by entry, for the tests
// of package treecopy and the lab's tests of copies on real NFS.
package treecopytest

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Entry is what a tree comparison looks at for one path.
type Entry struct {
	Type           fs.FileMode
	Mode           uint32
	UID, GID       uint32
	Mtime          unix.Timespec
	Size           int64
	Data, Link     string
	Xattrs         string
	LinkGroup      string // the first path (in walk order) of the same inode, for hard links
	AllocatedBelow int64  // blocks*512 for regular files
}

// Describe walks root without following symlinks and describes each path.
func Describe(t *testing.T, root string) map[string]Entry {
	t.Helper()
	out := map[string]Entry{}
	firstOf := map[uint64]string{}
	walkErr := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		e := Entry{Type: d.Type(), Mode: st.Mode & 0o7777, UID: st.Uid, GID: st.Gid, Mtime: st.Mtim}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			e.Data, e.Size, e.AllocatedBelow = string(b), st.Size, st.Blocks*512
			if st.Nlink > 1 {
				if first, ok := firstOf[st.Ino]; ok {
					e.LinkGroup = first
				} else {
					firstOf[st.Ino], e.LinkGroup = rel, rel
				}
			}
		case unix.S_IFLNK:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			e.Link = l
			e.Mode = 0
		}
		if st.Mode&unix.S_IFMT == unix.S_IFREG || st.Mode&unix.S_IFMT == unix.S_IFDIR {
			var names []string
			if sz, err := unix.Llistxattr(p, nil); err == nil && sz > 0 {
				buf := make([]byte, sz)
				n, _ := unix.Llistxattr(p, buf)
				for _, name := range strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00") {
					v := make([]byte, 256)
					m, _ := unix.Lgetxattr(p, name, v)
					names = append(names, name+"="+string(v[:max(m, 0)]))
				}
			}
			slices.Sort(names)
			e.Xattrs = strings.Join(names, ",")
		}
		out[rel] = e
		return nil
	})
	if walkErr != nil {
		t.Fatal(walkErr)
	}
	return out
}

// Compare fails for every path whose description differs between the two
// trees (the roots' own attributes only with rootAttrs); the paths
// leftOut must be in the source and not in the copy; sparse files must not
// take more room in the copy.
func Compare(t *testing.T, src, dst string, rootAttrs bool, leftOut ...string) {
	t.Helper()
	a, b := Describe(t, src), Describe(t, dst)
	for _, p := range leftOut {
		if _, ok := b[p]; ok {
			t.Errorf("%s: copied, should be left out", p)
		}
		delete(a, p)
	}
	for p, ea := range a {
		eb, ok := b[p]
		if !ok {
			t.Errorf("%s: missing from the copy", p)
			continue
		}
		if p == "." && !rootAttrs {
			continue
		}
		if eb.AllocatedBelow > ea.AllocatedBelow+64<<10 {
			t.Errorf("%s: the copy allocates %d bytes, the source %d: holes were filled", p, eb.AllocatedBelow, ea.AllocatedBelow)
		}
		ea.AllocatedBelow, eb.AllocatedBelow = 0, 0
		if ea != eb {
			t.Errorf("%s differs:\n source %+v\n copy   %+v", p, ea, eb)
		}
	}
	for p := range b {
		if _, ok := a[p]; !ok {
			t.Errorf("%s: in the copy only", p)
		}
	}
}
