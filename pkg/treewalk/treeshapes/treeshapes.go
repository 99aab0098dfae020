// Package treeshapes makes the trees a tenant can leave in a volume to
// break a walk over it: chains deeper than any descriptor budget, names
// whose paths pass PATH_MAX, wide directories, symlinks out of the tree
// and in loops, FIFOs, many names of one file. The tests of every walk
// nfsdir makes over a tenant's tree (the usage count, the copy engine,
// the purge) run over each of them.
package treeshapes

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Shape is one hostile tree: Build makes it below root, pointing its
// symlinks at outside (a directory no walk may enter, change or remove
// anything in), and returns how many entries it made below root.
type Shape struct {
	Name  string
	Build func(root, outside string) (entries int, err error)
}

// All are the shapes, each small enough for a unit test and larger than
// the bounds the walks are tested with (a few open directories, a few
// hundred entries read at once).
var All = []Shape{
	{"chain of 1500 directories, a file at each", func(root, _ string) (int, error) { return chain(root, "d", 1500, true) }},
	{"chain of 255-byte names, 16 KiB deep", func(root, _ string) (int, error) {
		return chain(root, strings.Repeat("n", 255), 64, false)
	}},
	{"3000 entries in one directory", wide},
	{"symlinks out of the tree and in a loop", links},
	{"FIFOs and names of one file", fifosAndHardLinks},
}

// Outside makes the directory a shape's symlinks point at, with one file
// in it, and returns a check that it is as it was.
func Outside(dir string) (check func() error, err error) {
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("outside"), 0o600); err != nil {
		return nil, err
	}
	return func() error {
		b, err := os.ReadFile(secret)
		if err != nil || string(b) != "outside" {
			return fmt.Errorf("the file outside the tree holds %q, %v", b, err)
		}
		ents, err := os.ReadDir(dir)
		if err != nil || len(ents) != 1 {
			return fmt.Errorf("the directory outside the tree holds %d entries, %v", len(ents), err)
		}
		return nil
	}, nil
}

// chain makes depth nested directories named name below root, a file in
// each when files is set, walking down by descriptors so that no path
// grows long.
func chain(root, name string, depth int, files bool) (int, error) {
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	n := 0
	for i := 0; i < depth; i++ {
		if files {
			f, err := unix.Openat(fd, "f", unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
			if err != nil {
				unix.Close(fd)
				return n, err
			}
			unix.Write(f, []byte("x"))
			unix.Close(f)
			n++
		}
		if err := unix.Mkdirat(fd, name, 0o755); err != nil {
			unix.Close(fd)
			return n, err
		}
		n++
		next, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			return n, err
		}
		fd = next
	}
	unix.Close(fd)
	return n, nil
}

func wide(root, _ string) (int, error) {
	for i := 0; i < 3000; i++ {
		if err := os.WriteFile(filepath.Join(root, fmt.Sprintf("file-%04d", i)), nil, 0o644); err != nil {
			return i, err
		}
	}
	return 3000, nil
}

func links(root, outside string) (int, error) {
	if err := os.MkdirAll(filepath.Join(root, "a", "b"), 0o755); err != nil {
		return 0, err
	}
	made := 2
	for name, target := range map[string]string{
		"out-abs":    outside,
		"out-secret": filepath.Join(outside, "secret"),
		"a/b/up":     "../../..",
		"a/loop":     "loop",
		"a/b/cycle":  "..",
		"dangling":   "nowhere/at/all",
	} {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			return made, err
		}
		made++
	}
	return made, nil
}

func fifosAndHardLinks(root, _ string) (int, error) {
	if err := unix.Mkfifo(filepath.Join(root, "fifo"), 0o600); err != nil {
		return 0, err
	}
	if err := os.Mkdir(filepath.Join(root, "d"), 0o755); err != nil {
		return 1, err
	}
	if err := unix.Mkfifo(filepath.Join(root, "d", "fifo"), 0o644); err != nil {
		return 2, err
	}
	first := filepath.Join(root, "one")
	if err := os.WriteFile(first, []byte("shared"), 0o644); err != nil {
		return 3, err
	}
	made := 4
	for i := 0; i < 200; i++ {
		if err := os.Link(first, filepath.Join(root, "d", fmt.Sprintf("name-%03d", i))); err != nil {
			return made, err
		}
		made++
	}
	return made, nil
}

// OpenFDs is how many descriptors the process has open.
func OpenFDs() int {
	ents, _ := os.ReadDir("/proc/self/fd")
	return len(ents)
}
