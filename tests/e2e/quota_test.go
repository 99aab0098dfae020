package e2e

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nfsdir/nfsdir/pkg/quota"
	"github.com/nfsdir/nfsdir/tests/lab"
)

// TestProjectQuotaOnRealXFS: the server side of hard quotas (what the
// quota agent does), on the lab's XFS export mounted with prjquota. A
// directory gets a project with the inherit flag and a 16 MiB limit; a
// writer through an NFSv4.2 mount of the export stops near 16 MiB with
// ENOSPC (XFS's answer for a full project); statfs on an NFS mount of the
// directory shows the limit, as `df` in a pod would; raising the limit
// lets the writer go on; the usage reported is the directory's; renaming
// the directory out of its project's tree (what nfsdir's trash does)
// works, and renaming a file into another project's directory is EXDEV.
func TestProjectQuotaOnRealXFS(t *testing.T) {
	lab.Require(t)
	root := lab.QuotaExport()
	fs, err := quota.Open(root)
	if err != nil {
		t.Fatalf("the lab's quota export: %v", err)
	}
	defer fs.Close()
	vol := filepath.Join(root, "pvc-quota")
	other := filepath.Join(root, "pvc-other")
	for _, d := range []string{vol, other} {
		if err := os.Mkdir(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	defer os.RemoveAll(vol)
	defer os.RemoveAll(other)
	const id, otherID = 4101, 4102
	setProject(t, vol, id)
	setProject(t, other, otherID)
	if err := fs.SetLimits(id, quota.Limits{Bytes: 16 << 20, Inodes: 1000}); err != nil {
		t.Fatal(err)
	}
	defer fs.SetLimits(id, quota.Limits{})

	mnt := nfsMount(t, lab.Server()+":"+root, "vers=4.2")
	written, werr := fill(filepath.Join(mnt, "pvc-quota", "big"), 32<<20)
	t.Logf("wrote %d bytes before %v", written, werr)
	if !errors.Is(werr, syscall.ENOSPC) && !errors.Is(werr, syscall.EDQUOT) {
		t.Fatalf("writing past the project limit: %v after %d bytes, want ENOSPC (XFS) or EDQUOT", werr, written)
	}
	if written > 16<<20 || written < 12<<20 {
		t.Errorf("the writer stopped after %d bytes; the limit is %d", written, 16<<20)
	}
	u, err := fs.Get(id)
	if err != nil || u.Bytes > 16<<20 || u.Bytes < 12<<20 || u.Inodes != 2 || u.Limits.Bytes != 16<<20 {
		t.Errorf("usage %+v, %v; want about 16 MiB in 2 inodes (the directory and the file)", u, err)
	}
	// statfs inside the directory, over NFS: the project's figures.
	sub := nfsMount(t, lab.Server()+":"+vol, "vers=4.2")
	var st unix.Statfs_t
	if err := unix.Statfs(sub, &st); err != nil {
		t.Fatal(err)
	}
	if total := st.Blocks * uint64(st.Bsize); total != 16<<20 {
		t.Errorf("statfs of the directory over NFS: %d bytes total, want the limit %d", total, 16<<20)
	}
	if files := st.Files; files != 1000 {
		t.Errorf("statfs of the directory over NFS: %d inodes, want the limit 1000", files)
	}
	// Expansion: a higher limit lets the writer go on.
	if err := fs.SetLimits(id, quota.Limits{Bytes: 48 << 20, Inodes: 1000}); err != nil {
		t.Fatal(err)
	}
	if n, err := fill(filepath.Join(mnt, "pvc-quota", "more"), 8<<20); err != nil {
		t.Errorf("after raising the limit: %v after %d bytes", err, n)
	}
	// The pitfalls: across projects, a rename into another project's
	// tree is EXDEV; out of every project (the trash), it works.
	err = os.Rename(filepath.Join(vol, "more"), filepath.Join(other, "more"))
	if !errors.Is(err, syscall.EXDEV) {
		t.Errorf("rename into another project's directory: %v, want EXDEV", err)
	}
	trash := filepath.Join(root, "trash")
	os.Mkdir(trash, 0o700)
	defer os.RemoveAll(trash)
	if err := os.Rename(vol, filepath.Join(trash, "pvc-quota")); err != nil {
		t.Errorf("rename of the project's directory into a directory of no project: %v", err)
	}
	os.Rename(filepath.Join(trash, "pvc-quota"), vol)
	f, err := os.Open(vol)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if got, inherit, err := quota.Project(f); err != nil || got != id || !inherit {
		t.Errorf("project of the directory: %d inherit %v, %v", got, inherit, err)
	}
}

func setProject(t *testing.T, dir string, id uint32) {
	t.Helper()
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := quota.SetProject(f, id); err != nil {
		t.Fatal(err)
	}
}

// nfsMount mounts source with options on a new directory and unmounts it
// at the end of the test.
func nfsMount(t *testing.T, source, options string) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "nfs", "-o", options, source, dir).CombinedOutput(); err != nil {
		t.Fatalf("mount %s: %v: %s", source, err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() { exec.Command("umount", "-f", dir).Run() })
	return dir
}

// fill writes up to n bytes to a new file, syncing every MiB so that the
// server's answer comes back with the write, and returns how many bytes
// were written before the first failure.
func fill(path string, n int) (int, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o644)
	if err != nil {
		return 0, err
	}
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i)
	}
	written := 0
	for written < n {
		if _, err := f.Write(buf); err != nil {
			f.Close()
			return written, err
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return written, err
		}
		written += len(buf)
	}
	return written, f.Close()
}
