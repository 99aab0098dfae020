package k8s

import (
	"context"
	"crypto/x509"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nfsdir/nfsdir/tests/lab"
)

// TestSecureDriverOnKubernetes runs in a lab guest of Debian 13 (make
// e2e-secure: kernel 6.12, RPC-with-TLS, the guest's own kernel NFS
// server with a KDC and gssproxy): the chart with securityDaemons runs
// tlshd and rpc.gssd from the nfsdir-daemons image in the node plugin and
// the controller, from Secrets. A class of an export that allows only
// xprtsec=mtls, and one of an export that allows only sec=krb5p, each get
// a ReadWriteMany claim that two pods use at once; every mount of it (the
// pods' and the controller's share mount) is read back from the mount
// tables, and a plain mount of each export is refused. The classes are
// deploy/example/storageclass-encrypted.yaml's, naming the lab's server.
func TestSecureDriverOnKubernetes(t *testing.T) {
	if os.Getenv("NFSDIR_LAB") != "1" || os.Getenv("NFSDIR_E2E_SECURE") != "1" {
		t.Skip("runs in the Debian 13 lab guest: make e2e-secure")
	}
	c := startCluster(t)
	lab.LoadCrypto(t)

	// The server's name, the one in its certificate and its Kerberos
	// principal: the node resolves it to its own loopback (the node
	// plugin's and the kubelet's hosts file), the controller's pod, in a
	// network of its own, to the node's address.
	kdc := lab.StartKDC(t)
	gssproxy := lab.StartGSSProxy(t, kdc)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("krb5kdc:\n%s\ngssproxy:\n%s", kdc.Daemon.Output(), gssproxy.Output())
		}
	})
	// The daemons' krb5.conf: the KDC at the node's address, and short
	// host names left as they are (in a pod, Kerberos would qualify them
	// with the pod's first DNS search domain: docs/encryption.md).
	krb5conf := strings.Replace(strings.ReplaceAll(string(lab.ReadFile(t, "/etc/krb5.conf")), "127.0.0.1", nodeIP),
		"[libdefaults]\n", "[libdefaults]\n\tqualify_shortname = \"\"\n", 1)
	if !strings.Contains(krb5conf, "qualify_shortname") {
		t.Fatalf("krb5.conf has no [libdefaults]:\n%s", krb5conf)
	}

	p := lab.NewPKI(t)
	server, err := p.Issue("nfs-server", &x509.Certificate{ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, DNSNames: []string{lab.Hostname}})
	if err != nil {
		t.Fatal(err)
	}
	client, err := p.Issue("nodes", &x509.Certificate{ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, DNSNames: []string{nodeName}})
	if err != nil {
		t.Fatal(err)
	}
	c.secret("nfs-tls", map[string][]byte{"ca.crt": lab.ReadFile(t, p.CA), "tls.crt": lab.ReadFile(t, client.Cert), "tls.key": lab.ReadFile(t, client.Key)})
	c.secret("nfs-server-tls", map[string][]byte{"ca.crt": lab.ReadFile(t, p.CA), "tls.crt": lab.ReadFile(t, server.Cert), "tls.key": lab.ReadFile(t, server.Key)})
	c.secret("nfs-krb5", map[string][]byte{"krb5.keytab": lab.ReadFile(t, kdc.ClientKeytab), "krb5.conf": []byte(krb5conf)})
	c.stage("KDC, gssproxy, certificates and Secrets")

	// The example's classes, with the lab server's name.
	c.create(strings.ReplaceAll(c.example("storageclass-encrypted.yaml"), "nfs.example.com", lab.Hostname))
	images := []string{"--set", "securityDaemons.image.repository=lab.local/nfsdir-daemons", "--set", "securityDaemons.image.tag=lab",
		"--set", "securityDaemons.image.pullPolicy=Never",
		"--set", "controller.hostAliases[0].ip=" + nodeIP, "--set", "controller.hostAliases[0].hostnames[0]=" + lab.Hostname}
	// One server is reached with one transport security per network
	// namespace (docs/encryption.md, "One connection per server"): the
	// chart is installed for TLS, then again for Kerberos.
	for _, s := range []struct {
		class, export, option, plain string
		daemons                      []string
	}{
		{"nfsdir-tls", "/srv/k8s-tls", "xprtsec=mtls", "xprtsec=none", []string{"--set", "securityDaemons.tlshd.enabled=true",
			"--set", "securityDaemons.tlshd.secretName=nfs-tls", "--set", "securityDaemons.tlshd.serverSecretName=nfs-server-tls"}},
		{"nfsdir-krb5p", "/srv/k8s-krb5p", "sec=krb5p", "sec=sys", []string{"--set", "securityDaemons.gssd.enabled=true",
			"--set", "securityDaemons.gssd.secretName=nfs-krb5", "--set", "securityDaemons.gssd.logLevel=3"}},
	} {
		t.Run(s.class, func(t *testing.T) {
			cc := c.in(t)
			defer cc.daemonLogsOnFailure()
			lab.AddExport(t, s.export, s.option)
			// Before any mount of the server: a later one would join the
			// connection of the first (TLS included) and say nothing of the
			// export's rule.
			lab.WaitNoNFSClients(t)
			target := t.TempDir()
			out, err := exec.Command("timeout", "60", "mount", "-t", "nfs", "-o", "vers=4.2,"+s.plain, lab.Hostname+":"+s.export, target).CombinedOutput()
			if err == nil {
				t.Errorf("a mount of %s with %s succeeded", s.export, s.plain)
				exec.Command("umount", "-l", target).Run()
			} else {
				cc.stage(fmt.Sprintf("a mount of %s with %s is refused: %s", s.export, s.plain, strings.TrimSpace(string(out))))
			}
			lab.ForgetServerClients(t)
			cc.installDriver(append(images, s.daemons...)...)
			t.Cleanup(func() {
				cc.helm("uninstall", release, "--namespace", driverNS, "--wait", "--timeout", "3m")
				cc.waitFor("the driver's pods gone", 3*time.Minute, func() (bool, error) {
					n := len(cc.pods(driverNS, "app.kubernetes.io/name=nfsdir"))
					return n == 0, fmt.Errorf("%d pods", n)
				})
				lab.ForgetServerClients(t)
			})
			cc.secureClaim(s.class, s.export, s.option)
		})
	}
}

// secureClaim: a ReadWriteMany claim of class (on export, whose mounts
// ask for option) used by two pods that each see the other's file; the
// controller's share mount and both pods' mounts carry the option; then
// the pods and the claim go, and the directory with them.
func (c *cluster) secureClaim(name, export, option string) {
	ctx := context.Background()
	c.create(fmt.Sprintf(`apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: %[1]s, namespace: default}
spec: {accessModes: [ReadWriteMany], storageClassName: %[1]s, resources: {requests: {storage: 1Gi}}}
`, name))
	pv := c.boundPV("default", name)
	// What the provisioner was told before it succeeded, if anything.
	if ev, err := c.kube.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name}); err == nil {
		for _, e := range ev.Items {
			if e.Type == corev1.EventTypeWarning {
				c.t.Logf("claim %s: %s (%d times): %s", name, e.Reason, e.Count, e.Message)
			}
		}
	}
	dir := filepath.Join(export, "default", name)
	c.stage(fmt.Sprintf("claim %s Bound: %s made on the server", name, dir))
	if m := procMounts(c.t, "nfsdir", export); len(m) == 0 || !strings.Contains(m[0], option) {
		c.t.Errorf("the controller's share mount of %s: %q, want %s", export, m, option)
	}
	for i := range 2 {
		c.create(strings.Replace(podOn(fmt.Sprintf("%s-%d", name, i), name, fmt.Sprintf(
			`echo %[1]d > /data/pod-%[1]d && until [ -e /data/pod-0 ] && [ -e /data/pod-1 ]; do sleep 1; done && exec sleep 100000`, i)),
			"restartPolicy: Never", "restartPolicy: Never\n  terminationGracePeriodSeconds: 1", 1))
	}
	for i := range 2 {
		c.podRunning("default", fmt.Sprintf("%s-%d", name, i), 5*time.Minute)
	}
	c.waitFor("both pods wrote through "+option, 2*time.Minute, func() (bool, error) {
		for i := range 2 {
			if _, err := os.Stat(filepath.Join(dir, fmt.Sprintf("pod-%d", i))); err != nil {
				return false, err
			}
		}
		return true, nil
	})
	for i := range 2 {
		p, err := c.kube.CoreV1().Pods("default").Get(ctx, fmt.Sprintf("%s-%d", name, i), metav1.GetOptions{})
		if err != nil {
			c.t.Fatal(err)
		}
		m := mounts(string(p.UID), pv.Name)
		if len(m) != 1 || !strings.Contains(m[0], option) || !strings.Contains(m[0], lab.Hostname+":"+dir) {
			c.t.Errorf("pod %s: want one mount of %s:%s with %s, the node has %q", p.Name, lab.Hostname, dir, option, m)
		}
	}
	c.stage(fmt.Sprintf("two pods share claim %s over %s", name, option))
	for i := range 2 {
		if err := c.kube.CoreV1().Pods("default").Delete(ctx, fmt.Sprintf("%s-%d", name, i), metav1.DeleteOptions{}); err != nil {
			c.t.Fatal(err)
		}
	}
	if err := c.kube.CoreV1().PersistentVolumeClaims("default").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		c.t.Fatal(err)
	}
	c.waitFor("claim "+name+"'s volume deleted", 3*time.Minute, func() (bool, error) {
		if _, err := c.kube.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{}); err == nil {
			return false, fmt.Errorf("volume %s still there", pv.Name)
		}
		if _, err := os.Stat(dir); err == nil {
			return false, fmt.Errorf("%s still on the server", dir)
		}
		return true, nil
	})
}

// daemonLogsOnFailure logs what the driver's pods and their daemons said
// when the test failed.
func (c *cluster) daemonLogsOnFailure() {
	if !c.t.Failed() {
		return
	}
	c.dumpDriverOnFailure()
	for _, p := range c.pods(driverNS, "app.kubernetes.io/name=nfsdir") {
		for _, ctr := range []string{"nfsdir", "tlshd", "rpc-gssd"} {
			c.t.Logf("pod %s container %s:\n%s", p.Name, ctr, c.logsOf(driverNS, p.Name, ctr))
		}
	}
}

// secret creates a Secret in the driver's namespace.
func (c *cluster) secret(name string, data map[string][]byte) {
	if _, err := c.kube.CoreV1().Secrets(driverNS).Create(context.Background(),
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: data}, metav1.CreateOptions{}); err != nil {
		c.t.Fatal(err)
	}
}

// procMounts lists the NFS mounts of export in the mount namespace of the
// controller's process named comm (nfsdir --mode=controller, in its pod).
func procMounts(t *testing.T, comm, export string) []string {
	t.Helper()
	pids, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range pids {
		b, err := os.ReadFile(filepath.Join(p, "comm"))
		if err != nil || strings.TrimSpace(string(b)) != comm {
			continue
		}
		if args, _ := os.ReadFile(filepath.Join(p, "cmdline")); !strings.Contains(string(args), "--mode=controller") {
			continue
		}
		info, err := os.ReadFile(filepath.Join(p, "mountinfo"))
		if err != nil {
			continue
		}
		var out []string
		for _, l := range strings.Split(string(info), "\n") {
			if strings.Contains(l, ":"+export+" ") && strings.Contains(l, " nfs") {
				out = append(out, l)
			}
		}
		if len(out) > 0 {
			return out
		}
	}
	return nil
}
