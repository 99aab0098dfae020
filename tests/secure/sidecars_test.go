package secure

import (
	"crypto/x509"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nfsdir/nfsdir/tests/lab"
)

// daemonsImage is a copy, of the test's own, of the daemons image's root
// file system (tests/k8s/daemons-rootfs.sh with the nfsdir binary, which
// make test-secure puts in the lab): the chart's sidecars run it. As a
// container runtime does, it gets /proc and /dev.
func daemonsImage(t *testing.T) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "daemons")
	if out, err := exec.Command("cp", "-a", "/work/bin/daemons", root).CombinedOutput(); err != nil {
		t.Fatalf("the daemons image's root file system: %v\n%s", err, out)
	}
	for _, m := range []struct{ dir, fstype, source string }{{"proc", "proc", "proc"}, {"dev", "", "/dev"}} {
		dir := filepath.Join(root, m.dir)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		flags := uintptr(0)
		if m.fstype == "" {
			flags = syscall.MS_BIND | syscall.MS_REC
		}
		if err := syscall.Mount(m.source, dir, m.fstype, flags, ""); err != nil {
			t.Fatalf("mount %s at %s: %v", m.source, dir, err)
		}
		t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	}
	return root
}

// sidecar runs `nfsdir daemon args...` in root as the chart's sidecar
// does: in the network namespace that mounts, with its own root.
func sidecar(t *testing.T, root string, args ...string) *lab.Daemon {
	t.Helper()
	lab.LoadCrypto(t)
	return lab.StartDaemon(t, nil, append([]string{"chroot", root, "/nfsdir", "daemon"}, args...)...)
}

// TestDaemonsImageServesTLS: tlshd of the daemons image, started by
// `nfsdir daemon tlshd` from a Secret volume's files as the chart's
// sidecar starts it, answers the handshakes of nfsdir's xprtsec=mtls
// mounts (the controller's and the node's). While the Secret holds an
// expired client certificate the mount is refused; once the Secret is
// updated in place, the next mount succeeds with the same tlshd, not
// restarted.
func TestDaemonsImageServesTLS(t *testing.T) {
	guest(t)
	root := daemonsImage(t)
	p := lab.NewPKI(t)
	server, err := p.Issue("nfs-server", &x509.Certificate{ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, DNSNames: []string{lab.Hostname}})
	if err != nil {
		t.Fatal(err)
	}
	clientTmpl := func() *x509.Certificate {
		return &x509.Certificate{ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, DNSNames: []string{"lab-node"}}
	}
	expiredTmpl := clientTmpl()
	expiredTmpl.NotBefore, expiredTmpl.NotAfter = time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour)
	expired, err := p.Issue("expired-client", expiredTmpl)
	if err != nil {
		t.Fatal(err)
	}
	good, err := p.Issue("good-client", clientTmpl())
	if err != nil {
		t.Fatal(err)
	}
	secret := lab.NewSecret(t, filepath.Join(root, "etc/nfsdir/tls"), map[string][]byte{
		"ca.crt": lab.ReadFile(t, p.CA), "tls.crt": lab.ReadFile(t, expired.Cert), "tls.key": lab.ReadFile(t, expired.Key)})
	// The lab's NFS server shares the network namespace, so the same
	// tlshd answers its handshakes.
	lab.NewSecret(t, filepath.Join(root, "etc/nfsdir/server-tls"), map[string][]byte{
		"ca.crt": lab.ReadFile(t, p.CA), "tls.crt": lab.ReadFile(t, server.Cert), "tls.key": lab.ReadFile(t, server.Key)})
	d := sidecar(t, root, "tlshd", "--secret-dir", "/etc/nfsdir/tls", "--server-secret-dir", "/etc/nfsdir/server-tls", "--log-level", "1")
	d.WaitTLSHD(t)
	pid := d.Pid()
	c := driver(t)
	lab.AddExport(t, "/export-sidecar-tls", "xprtsec=mtls")
	opts := []string{"nfsvers=4.2", "xprtsec=mtls"}

	names(t, createRefusedSoon(t, c, "/export-sidecar-tls", opts...), "certificate")

	secret.Update(t, map[string][]byte{"ca.crt": lab.ReadFile(t, p.CA), "tls.crt": lab.ReadFile(t, good.Cert), "tls.key": lab.ReadFile(t, good.Key)})
	v := c.Create(t, "pvc-sidecar-tls", params("/export-sidecar-tls"), lab.RWX(opts...))
	if line := shareMount(t, "/export-sidecar-tls"); !strings.Contains(line, "xprtsec=mtls") {
		t.Errorf("the controller's share mount: %s", line)
	}
	target := filepath.Join(t.TempDir(), "target")
	c.Publish(t, v, target, lab.RWX(opts...), false)
	if line := lab.MountInfo(t, target); !strings.Contains(line, "xprtsec=mtls") {
		t.Errorf("the node's mount: %s", line)
	}
	if err := os.WriteFile(filepath.Join(target, "f"), []byte("through the sidecar's tlshd"), 0o644); err != nil {
		t.Error(err)
	}
	if !d.Running() || d.Pid() != pid {
		t.Errorf("tlshd was restarted")
	}
	c.Unpublish(t, v, target)
	c.Delete(t, v)
}

// TestDaemonsImageServesKerberos: rpc.gssd of the daemons image, started
// by `nfsdir daemon rpc.gssd` from a Secret volume's keytab and krb5.conf
// (it mounts the kernel's rpc_pipefs in its own root), gives nfsdir's
// sec=krb5p mounts their machine credential; the driver's check finds it
// running.
func TestDaemonsImageServesKerberos(t *testing.T) {
	guest(t)
	root := daemonsImage(t)
	kdc := lab.StartKDC(t)
	lab.StartGSSProxy(t, kdc)
	// The node's names, as the kubelet gives a host-network pod the node's
	// /etc/hosts.
	if err := os.WriteFile(filepath.Join(root, "etc/hosts"), lab.ReadFile(t, "/etc/hosts"), 0o644); err != nil {
		t.Fatal(err)
	}
	lab.NewSecret(t, filepath.Join(root, "etc/nfsdir/krb5"), map[string][]byte{
		"krb5.keytab": lab.ReadFile(t, kdc.ClientKeytab), "krb5.conf": lab.ReadFile(t, "/etc/krb5.conf")})
	pipefs := filepath.Join(root, "run/rpc_pipefs")
	t.Cleanup(func() { syscall.Unmount(pipefs, syscall.MNT_DETACH) })
	d := sidecar(t, root, "rpc.gssd", "--secret-dir", "/etc/nfsdir/krb5", "--log-level", "1")
	d.WaitGssd(t, pipefs)
	c := driver(t)
	lab.AddExport(t, "/export-sidecar-krb5p", "sec=krb5p")
	opts := []string{"nfsvers=4.2", "sec=krb5p"}
	v := c.Create(t, "pvc-sidecar-krb5p", params("/export-sidecar-krb5p"), lab.RWX(opts...))
	if line := shareMount(t, "/export-sidecar-krb5p"); !strings.Contains(line, "sec=krb5p") {
		t.Errorf("the controller's share mount: %s", line)
	}
	target := filepath.Join(t.TempDir(), "target")
	c.Publish(t, v, target, lab.RWX(opts...), false)
	if line := lab.MountInfo(t, target); !strings.Contains(line, "sec=krb5p") {
		t.Errorf("the node's mount: %s", line)
	}
	if err := os.WriteFile(filepath.Join(target, "f"), []byte("through the sidecar's rpc.gssd"), 0o644); err != nil {
		t.Error(err)
	}
	c.Unpublish(t, v, target)
	c.Delete(t, v)
}
