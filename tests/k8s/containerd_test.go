package k8s

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestContainerdRunsLabImages runs in the NFS lab guest (make e2e-smoke):
// containerd and runc from Debian packages import the lab's image tarballs
// and run them, which proves the images built without Docker are what a
// kubelet's containerd will load.
func TestContainerdRunsLabImages(t *testing.T) {
	if os.Getenv("NFSDIR_LAB") != "1" || os.Getenv("NFSDIR_E2E_SMOKE") != "1" {
		t.Skip("runs in the lab guest: make e2e-smoke")
	}
	bin := "/work/bin"
	// runc re-executes itself for the container's init without our
	// environment: its libseccomp must be where the loader looks.
	if b, err := os.ReadFile(filepath.Join(bin, "lib", "libseccomp.so.2")); err == nil {
		os.WriteFile("/lib/x86_64-linux-gnu/libseccomp.so.2", b, 0o644)
	}
	os.MkdirAll("/sys/fs/cgroup", 0o755)
	if out, err := exec.Command("mount", "-t", "cgroup2", "none", "/sys/fs/cgroup").CombinedOutput(); err != nil {
		t.Fatalf("mount cgroup2: %v %s", err, out)
	}
	dir := t.TempDir()
	sock := filepath.Join(dir, "containerd.sock")
	cfg := filepath.Join(dir, "config.toml")
	os.WriteFile(cfg, []byte(`version = 2
root = "`+dir+`/root"
state = "`+dir+`/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "`+sock+`"
`), 0o644)
	ctrd := exec.Command(filepath.Join(bin, "containerd"), "--config", cfg)
	ctrd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+filepath.Join(bin, "lib"), "PATH="+bin+":"+os.Getenv("PATH"))
	logf, _ := os.Create(filepath.Join(dir, "containerd.log"))
	ctrd.Stdout, ctrd.Stderr = logf, logf
	start := time.Now()
	if err := ctrd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { ctrd.Process.Kill(); ctrd.Wait() }()
	ctr := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(bin, "ctr"), append([]string{"--address", sock, "-n", "lab"}, args...)...)
		cmd.Env = ctrd.Env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	for {
		if _, err := ctr("version"); err == nil {
			break
		}
		if time.Since(start) > time.Minute {
			b, _ := os.ReadFile(filepath.Join(dir, "containerd.log"))
			t.Fatalf("containerd not up after a minute:\n%s", b)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("containerd up in %s", time.Since(start).Round(time.Millisecond))
	images, _ := filepath.Glob(filepath.Join(bin, "images", "*.tar"))
	if len(images) < 5 { // nfsdir, pause, busybox, registrar, livenessprobe (+ csi-provisioner after make k8s-bins)
		t.Fatalf("images: %v", images)
	}
	for _, img := range images {
		t0 := time.Now()
		if out, err := ctr("images", "import", "--snapshotter", "overlayfs", img); err != nil {
			t.Fatalf("import %s: %v\n%s", img, err, out)
		}
		t.Logf("imported %s in %s", filepath.Base(img), time.Since(t0).Round(time.Millisecond))
	}
	run := func(name, image string, cmd ...string) string {
		t.Helper()
		args := append([]string{"run", "--rm", "--snapshotter", "overlayfs", "--no-pivot", image, name}, cmd...)
		out, err := ctr(args...)
		if err != nil {
			t.Fatalf("ctr %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	if out := run("bb", "lab.local/busybox:lab", "/bin/echo", "hello from busybox"); !strings.Contains(out, "hello from busybox") {
		t.Errorf("busybox: %q", out)
	}
	if out := run("drv", "lab.local/nfsdir:lab", "/nfsdir", "--version"); !strings.Contains(out, "nfsdir") {
		t.Errorf("nfsdir image: %q", out)
	}
	if out := run("mnt", "lab.local/nfsdir:lab", "/sbin/mount.nfs", "-V"); !strings.Contains(out, "nfs-utils") {
		t.Errorf("mount.nfs in the nfsdir image: %q", out)
	}
	refs := []string{"lab.local/pause:3.10", "lab.local/csi-node-driver-registrar:v2.15.0", "lab.local/livenessprobe:v2.17.0"}
	if _, err := os.Stat(filepath.Join(bin, "images", "csi-provisioner.tar")); err == nil {
		refs = append(refs, "lab.local/csi-provisioner:v5.3.0")
	}
	if _, err := os.Stat(filepath.Join(bin, "images", "csi-resizer.tar")); err == nil {
		refs = append(refs, "lab.local/csi-resizer:v1.14.0")
	}
	for _, ref := range refs {
		if out, err := ctr("images", "check", "name=="+ref); err != nil || !strings.Contains(out, "complete") {
			t.Errorf("image %s: %v %s", ref, err, out)
		}
	}
}
