// Package secure tests NFS over TLS and Kerberos through nfsdir on a
// kernel that speaks them (the lab guest made of Debian 13: `make
// test-secure`), with the real daemons: tlshd, a KDC, gssproxy and
// rpc.gssd. Each test asserts on what the kernel did: the mount table,
// what crossed the wire, what a plain mount is answered.
package secure

import (
	"bytes"
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nfsdir/nfsdir/pkg/config"
	"github.com/nfsdir/nfsdir/pkg/nfsmount"
	"github.com/nfsdir/nfsdir/tests/lab"
)

// begin starts a test of the secure lab (guest) with a driver (driver).
func begin(t *testing.T) *lab.Client {
	t.Helper()
	guest(t)
	return driver(t)
}

// guest starts a test of the secure lab: it must run in a guest whose
// kernel has RPC-with-TLS (6.5 or later) and the daemons. When the test
// ends, after everything it started has stopped, the server forgets its
// NFSv4 clients (lab.ForgetServerClients). Daemons a test's mounts need
// are started after guest and before driver, so that the driver unmounts
// its shares while they still run.
func guest(t *testing.T) {
	t.Helper()
	lab.Require(t)
	if lab.Release() != "trixie" {
		t.Fatalf("the secure lab runs in the Debian 13 guest (make test-secure), not %s", lab.Release())
	}
	t.Cleanup(func() {
		lab.ForgetServerClients(t)
		if t.Failed() {
			out, _ := exec.Command("sh", "-c", "dmesg | tail -n 30; cat /proc/fs/nfsfs/servers").CombinedOutput()
			t.Logf("the kernel's log and NFS clients:\n%s", out)
		}
	})
}

// driver starts nfsdir's driver with its metrics at metricsAddress and
// connects to it.
func driver(t *testing.T) *lab.Client {
	t.Helper()
	d := lab.StartDriver(t, nfsmount.NewSystem(), func(c *config.Config) { c.MetricsAddress = metricsAddress })
	return lab.Connect(t, d.Endpoint)
}

// metricsAddress is where the driver of begin serves its metrics.
const metricsAddress = "127.0.0.1:29700"

// mountsMetric fails the test unless the driver's metrics count n mounts
// with security sec.
func mountsMetric(t *testing.T, sec string, n int) {
	t.Helper()
	resp, err := http.Get("http://" + metricsAddress + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	want := fmt.Sprintf("nfsdir_node_volume_mounts{security=%q} %d\n", sec, n)
	if !strings.Contains(string(b), want) {
		var got []string
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "nfsdir_node_volume_mounts{") {
				got = append(got, l)
			}
		}
		t.Errorf("metrics: want %q, have %q", want, got)
	}
}

func params(share string) map[string]string {
	return map[string]string{"server": lab.Hostname, "share": share}
}

// pki issues the lab's server certificate (for nfslab) and a client
// certificate, and starts tlshd with them.
func tlsLab(t *testing.T, mutate func(server, client *x509.Certificate)) *lab.Daemon {
	t.Helper()
	p := lab.NewPKI(t)
	st := &x509.Certificate{ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, DNSNames: []string{lab.Hostname}}
	ct := &x509.Certificate{ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, DNSNames: []string{"lab-node"}}
	if mutate != nil {
		mutate(st, ct)
	}
	server, err := p.Issue("nfs-server", st)
	if err != nil {
		t.Fatal(err)
	}
	client, err := p.Issue("nfs-client", ct)
	if err != nil {
		t.Fatal(err)
	}
	return lab.StartTLSHD(t, lab.TLSHD{ClientCA: p.CA, ClientCert: client, ServerCA: p.CA, ServerCert: server})
}

// plainMountRefused mounts share with the kernel's NFS client and the
// given options, and fails the test unless the mount is refused.
func plainMountRefused(t *testing.T, share string, opts string) {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	t0 := time.Now()
	out, err := exec.CommandContext(ctx, "mount", "-t", "nfs", "-o", opts, lab.Hostname+":"+share, dir).CombinedOutput()
	if err == nil {
		exec.Command("umount", dir).Run()
		t.Fatalf("mount -o %s of %s succeeded; the export must refuse it", opts, share)
	}
	t.Logf("mount -o %s of %s refused after %s: %s", opts, share, time.Since(t0).Round(time.Millisecond), strings.TrimSpace(string(out)))
}

// shareMount is the mount table line of the controller's mount of share.
func shareMount(t *testing.T, share string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, " "+lab.Hostname+":"+share+" ") {
			return line
		}
	}
	t.Fatalf("no mount of %s:%s in the mount table", lab.Hostname, share)
	return ""
}

// marker is a byte string the tests write and look for on the wire.
func marker() []byte {
	return []byte(fmt.Sprintf("nfsdir-cleartext-marker-%d-", time.Now().UnixNano()))
}

// writeObserved writes size bytes made of mark repeated to a new file in
// dir, flushed to the server, while a capture on the NFS port runs, and
// returns what the capture kept and how much NFS payload it saw.
func writeObserved(t *testing.T, dir string, mark []byte, size int) ([]byte, int64) {
	t.Helper()
	data := bytes.Repeat(mark, size/len(mark)+1)[:size]
	c := lab.StartCapture(t, 2049, 64<<20)
	f, err := os.Create(filepath.Join(dir, "secret"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return c.Stop()
}

// TestMutualTLSExport: an export that allows only xprtsec=mtls is refused
// to a plain mount and to a TLS mount without a client certificate, and
// nfsdir makes a volume on it (the controller's share mount) and publishes
// it (the node's mount), both with xprtsec=mtls in the mount table; bytes
// written through the volume cross the wire encrypted, where the same
// write to a plain export is seen in clear by the same capture.
func TestMutualTLSExport(t *testing.T) {
	c := begin(t)
	// The control: a capture sees a plain volume's bytes. Its mounts (NFSv3,
	// which shares no connection with NFSv4 mounts) stay while the TLS ones
	// are made.
	mark := marker()
	plain := c.Create(t, "pvc-plain", map[string]string{"server": lab.Server(), "share": lab.Export()}, lab.RWX("nfsvers=3"))
	ptarget := filepath.Join(t.TempDir(), "plain")
	c.Publish(t, plain, ptarget, lab.RWX("nfsvers=3"), false)
	kept, seen := writeObserved(t, ptarget, mark, 1<<20)
	if !bytes.Contains(kept, mark) {
		t.Errorf("the capture did not see a plain write's bytes (%d bytes of payload seen)", seen)
	}
	defer c.Delete(t, plain)
	defer c.Unpublish(t, plain, ptarget)

	tlsLab(t, nil)
	lab.AddExport(t, "/export-mtls", "xprtsec=mtls")
	plainMountRefused(t, "/export-mtls", "nfsvers=4.2")

	opts := []string{"nfsvers=4.2", "xprtsec=mtls"}
	v := c.Create(t, "pvc-mtls", params("/export-mtls"), lab.RWX(opts...))
	if line := shareMount(t, "/export-mtls"); !strings.Contains(line, "xprtsec=mtls") {
		t.Errorf("the controller's share mount: %s", line)
	}
	target := filepath.Join(t.TempDir(), "target")
	c.Publish(t, v, target, lab.RWX(opts...), false)
	if line := lab.MountInfo(t, target); !strings.Contains(line, "xprtsec=mtls") {
		t.Errorf("the node's mount: %s", line)
	}
	mountsMetric(t, "sec=sys,xprtsec=mtls", 1)
	mountsMetric(t, "sec=sys,xprtsec=none", 1)
	kept, seen = writeObserved(t, target, mark, 4<<20)
	if seen < 4<<20 {
		t.Errorf("the capture saw %d bytes of NFS payload for a 4 MiB write", seen)
	}
	if bytes.Contains(kept, mark) {
		t.Errorf("the written bytes crossed the wire in clear")
	}
	t.Logf("mtls: %d bytes of NFS payload seen, none of the written bytes", seen)

	c.Unpublish(t, v, target)
	c.Delete(t, v)
}

// TestKerberosPrivacyExport: an export that allows only sec=krb5p is
// refused to a sec=sys mount; nfsdir makes and publishes a volume on it
// with sec=krb5p (read back from the mount table) using the machine
// credential of the keytab, and what is written crosses the wire
// encrypted.
func TestKerberosPrivacyExport(t *testing.T) {
	guest(t)
	kdc := lab.StartKDC(t)
	lab.StartGSSProxy(t, kdc)
	lab.StartGssd(t)
	c := driver(t)
	lab.AddExport(t, "/export-krb5p", "sec=krb5p")
	plainMountRefused(t, "/export-krb5p", "nfsvers=4.2,sec=sys")

	opts := []string{"nfsvers=4.2", "sec=krb5p"}
	v := c.Create(t, "pvc-krb5p", params("/export-krb5p"), lab.RWX(opts...))
	if line := shareMount(t, "/export-krb5p"); !strings.Contains(line, "sec=krb5p") {
		t.Errorf("the controller's share mount: %s", line)
	}
	target := filepath.Join(t.TempDir(), "target")
	c.Publish(t, v, target, lab.RWX(opts...), false)
	if line := lab.MountInfo(t, target); !strings.Contains(line, "sec=krb5p") {
		t.Errorf("the node's mount: %s", line)
	}
	mountsMetric(t, "sec=krb5p,xprtsec=none", 1)
	mark := marker()
	kept, seen := writeObserved(t, target, mark, 4<<20)
	if seen < 4<<20 {
		t.Errorf("the capture saw %d bytes of NFS payload for a 4 MiB write", seen)
	}
	if bytes.Contains(kept, mark) {
		t.Errorf("the written bytes crossed the wire in clear")
	}
	c.Unpublish(t, v, target)
	c.Delete(t, v)
}

// refusedSoon publishes v with opts and fails the test unless the publish
// is refused within 30 s, with nothing mounted and no mount helper left.
func refusedSoon(t *testing.T, c *lab.Client, v *csi.Volume, opts ...string) error {
	t.Helper()
	target := filepath.Join(t.TempDir(), "target")
	t0 := time.Now()
	err := c.TryPublish(lab.Ctx(t, 2*time.Minute), v, target, lab.RWX(opts...), false)
	took := time.Since(t0)
	if err == nil {
		c.Unpublish(t, v, target)
		t.Fatalf("NodePublishVolume with %v succeeded", opts)
	}
	if took > 30*time.Second {
		t.Errorf("refused after %s, more than 30 s", took)
	}
	if lab.MountInfo(t, target) != "" {
		t.Errorf("target mounted")
	}
	if ps := lab.Processes("mount.nfs"); len(ps) > 0 {
		t.Errorf("mount helpers left running: %v", ps)
	}
	t.Logf("refused after %s: %v", took.Round(time.Millisecond), err)
	return err
}

// TestTLSBesideAPlainMountOfTheServer: Linux keeps one NFSv4 client per
// server (and network namespace) and every later NFSv4 mount of that
// server uses its connection, whatever xprtsec it asks. So while the node
// mounts the server without TLS, a TLS mount of it is refused with
// FailedPrecondition naming the plain mount, before anything is mounted:
// on an export that allows both it would otherwise travel in clear, on an
// export that allows only TLS it would be refused with a bare "Operation
// not permitted".
func TestTLSBesideAPlainMountOfTheServer(t *testing.T) {
	c := begin(t)
	tlsLab(t, nil)
	lab.AddExport(t, "/export-either", "xprtsec=none:mtls")
	lab.AddExport(t, "/export-tls-only", "xprtsec=mtls")
	opts := []string{"nfsvers=4.2", "xprtsec=mtls"}
	var either, only *csi.Volume
	withDriver(t, func(c *lab.Client) {
		either = c.Create(t, "pvc-either", params("/export-either"), lab.RWX(opts...))
		only = c.Create(t, "pvc-tls-only", params("/export-tls-only"), lab.RWX(opts...))
	})
	plain := filepath.Join(t.TempDir(), "plain")
	os.MkdirAll(plain, 0o755)
	lab.Sh(t, "mount -t nfs -o nfsvers=4.2 "+lab.Server()+":"+lab.Export()+" "+plain)
	defer lab.Sh(t, "umount "+plain)

	for _, v := range []*csi.Volume{either, only} {
		target := filepath.Join(t.TempDir(), "target")
		err := c.TryPublish(lab.Ctx(t, time.Minute), v, target, lab.RWX(opts...), false)
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), plain) {
			t.Errorf("NodePublishVolume of %s beside a plain mount: %v, want FailedPrecondition naming %s", v.GetVolumeContext()["share"], err, plain)
		}
		if line := lab.MountInfo(t, target); line != "" {
			kept, seen := writeObserved(t, target, marker(), 1<<20)
			t.Errorf("mounted: %s; a write's bytes seen in clear: %v (%d bytes of payload)", line, bytes.Contains(kept, []byte("nfsdir-cleartext-marker")), seen)
			c.Unpublish(t, v, target)
		}
		t.Logf("%v", err)
	}
}
