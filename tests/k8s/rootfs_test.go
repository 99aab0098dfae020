// Package k8s is the Kubernetes end-to-end lab: its clusters in qemu
// guests, the images they run and the scenarios run on them.
package k8s

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestNfsdirRootfsMounts builds the nfsdir image's runtime file system and
// runs its mount.nfs and mount inside it with chroot: every library they
// load is there.
func TestNfsdirRootfsMounts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chroot needs root")
	}
	dest := filepath.Join(t.TempDir(), "rootfs")
	if out, err := exec.Command("./nfsdir-rootfs.sh", dest).CombinedOutput(); err != nil {
		t.Fatalf("nfsdir-rootfs.sh: %v\n%s", err, out)
	}
	st, err := os.Stat(filepath.Join(dest, "sbin/mount.nfs"))
	if err != nil || st.Mode()&os.ModeSetuid == 0 {
		t.Errorf("mount.nfs: %v %v (Debian ships it setuid)", st, err)
	}
	for _, cmd := range [][]string{{"/sbin/mount.nfs", "-V"}, {"/bin/mount", "--version"}, {"/bin/umount", "--version"}} {
		out, err := exec.Command("chroot", append([]string{dest}, cmd...)...).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "nfs-utils") && !strings.Contains(string(out), "util-linux") {
			t.Errorf("chroot %s: %v\n%s", strings.Join(cmd, " "), err, out)
		}
	}
}
