package secure

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/nfsdir/nfsdir/pkg/nfsmount"
	"github.com/nfsdir/nfsdir/tests/lab"
)

// madeWhileGood makes a volume on share with opts through a driver of its
// own while setUp's daemons are good, then stops that driver and calls
// tearDown.
func madeWhileGood(t *testing.T, share string, opts []string, setUp, tearDown func()) *csi.Volume {
	t.Helper()
	setUp()
	var v *csi.Volume
	withDriver(t, func(c *lab.Client) { v = c.Create(t, "pvc-made-while-good", params(share), lab.RWX(opts...)) })
	tearDown()
	return v
}

// withDriver calls f with a driver of its own, stops the driver (which
// unmounts its shares) and waits until the kernel has no NFS client of any
// server left: the next mount makes a new one, with a connection of its
// own.
func withDriver(t *testing.T, f func(c *lab.Client)) {
	t.Helper()
	d := lab.StartDriver(t, nfsmount.NewSystem(), nil)
	f(lab.Connect(t, d.Endpoint))
	d.Stop()
	if b, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(b), " nfs4 ") {
		t.Fatalf("an NFS mount is left after the driver stopped:\n%s", b)
	}
	lab.WaitNoNFSClients(t)
}

// createRefusedSoon calls CreateVolume on share with opts and fails the
// test unless it is refused within 30 s with no mount helper left.
func createRefusedSoon(t *testing.T, c *lab.Client, share string, opts ...string) error {
	t.Helper()
	t0 := time.Now()
	_, err := c.Controller.CreateVolume(lab.Ctx(t, 2*time.Minute), &csi.CreateVolumeRequest{Name: "pvc-refused",
		Parameters: params(share), VolumeCapabilities: []*csi.VolumeCapability{lab.RWX(opts...)}})
	took := time.Since(t0)
	if err == nil {
		t.Fatalf("CreateVolume with %v succeeded", opts)
	}
	if took > 30*time.Second {
		t.Errorf("CreateVolume refused after %s, more than 30 s", took)
	}
	if ps := lab.Processes("mount.nfs"); len(ps) > 0 {
		t.Errorf("mount helpers left running: %v", ps)
	}
	t.Logf("CreateVolume refused after %s: %v", took.Round(time.Millisecond), err)
	return err
}

// TestTLSFailuresAreAnsweredSoon: a certificate that cannot work (an
// expired client certificate for an xprtsec=mtls export, a server
// certificate for another host name, an expired server certificate) is
// answered within 30 s by CreateVolume (the controller's share mount) and
// by NodePublishVolume, with nothing mounted and no helper left.
func TestTLSFailuresAreAnsweredSoon(t *testing.T) {
	past := func(c *x509.Certificate) {
		c.NotBefore, c.NotAfter = time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour)
	}
	for _, tc := range []struct {
		name, export, opt string
		mutate            func(server, client *x509.Certificate)
	}{
		{"expired client certificate", "xprtsec=mtls", "xprtsec=mtls", func(_, c *x509.Certificate) { past(c) }},
		{"server certificate for another host", "xprtsec=tls", "xprtsec=tls", func(s, _ *x509.Certificate) { s.DNSNames = []string{"elsewhere.example"} }},
		{"expired server certificate", "xprtsec=tls", "xprtsec=tls", func(s, _ *x509.Certificate) { past(s) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := begin(t)
			share := "/export-tls-failing"
			lab.AddExport(t, share, tc.export)
			opts := []string{"nfsvers=4.2", tc.opt}
			var good *lab.Daemon
			v := madeWhileGood(t, share, opts, func() { good = tlsLab(t, nil) }, func() { good.Stop() })
			tlsLab(t, tc.mutate)
			names(t, createRefusedSoon(t, c, share, opts...), "certificate")
			names(t, refusedSoon(t, c, v, opts...), "certificate")
		})
	}
}

// TestKerberosFailuresAreAnsweredSoon: a client whose keytab is missing or
// holds a key the realm no longer has (the principal was given a new key),
// or whose rpc.gssd is stopped, is answered within 30 s by CreateVolume and
// NodePublishVolume, with nothing mounted, no helper left and an error that
// names what to check.
func TestKerberosFailuresAreAnsweredSoon(t *testing.T) {
	for _, tc := range []struct {
		name     string
		breakKey func(t *testing.T, k *lab.KDC) // nil: rpc.gssd stays stopped
	}{
		{"no keytab", func(t *testing.T, k *lab.KDC) { os.Remove(k.ClientKeytab) }},
		{"a keytab whose key the realm changed", func(t *testing.T, k *lab.KDC) {
			k.Admin(t, "cpw -randkey "+lab.ClientPrincipal)
		}},
		{"rpc.gssd stopped", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			guest(t)
			kdc := lab.StartKDC(t)
			lab.StartGSSProxy(t, kdc)
			c := driver(t)
			share := "/export-krb5-failing"
			lab.AddExport(t, share, "sec=krb5:krb5i:krb5p")
			opts := []string{"nfsvers=4.2", "sec=krb5i"}
			var gssd *lab.Daemon
			v := madeWhileGood(t, share, opts, func() { gssd = lab.StartGssd(t) }, func() { gssd.Stop() })
			// The machine credential rpc.gssd cached goes with it, as on a
			// node that boots with the broken keytab.
			caches, _ := filepath.Glob("/tmp/krb5cc_machine_*")
			for _, f := range caches {
				os.Remove(f)
			}
			want := "no rpc.gssd runs"
			if tc.breakKey != nil {
				tc.breakKey(t, kdc)
				lab.StartGssd(t)
				want = "keytab"
			}
			names(t, createRefusedSoon(t, c, share, opts...), want)
			names(t, refusedSoon(t, c, v, opts...), want)
		})
	}
}

// names fails the test unless err's message names what.
func names(t *testing.T, err error, what string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), what) {
		t.Errorf("the error does not name %q: %v", what, err)
	}
}
