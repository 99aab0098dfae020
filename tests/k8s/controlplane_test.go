package k8s

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// pki writes a CA (certificate and key), a serving certificate for the API
// server, and a service-account key pair into dir.
func pki(t *testing.T, dir string) {
	t.Helper()
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	write := func(name, typ string, der []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeKey := func(name string, k *ecdsa.PrivateKey) {
		der, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		write(name, "PRIVATE KEY", der)
	}
	caKey := key()
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "nfsdir-lab-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	write("ca.crt", "CERTIFICATE", caDER)
	writeKey("ca.key", caKey)
	srvKey := key()
	srv := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kube-apiserver"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("192.0.2.10"), net.ParseIP("198.51.100.1")},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	caCert, _ := x509.ParseCertificate(caDER)
	srvDER, err := x509.CreateCertificate(rand.Reader, srv, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	write("apiserver.crt", "CERTIFICATE", srvDER)
	writeKey("apiserver.key", srvKey)
	saKey := key()
	writeKey("sa.key", saKey)
	pub, _ := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	write("sa.pub", "PUBLIC KEY", pub)
}

// TestControlPlaneComesUp runs in the lab guest (make e2e-controlplane, after
// make k8s-bins): etcd and kube-apiserver built from the module proxy start
// and the API server reports /readyz, which is the next step of the
// Kubernetes end-to-end lab.
func TestControlPlaneComesUp(t *testing.T) {
	if os.Getenv("NFSDIR_LAB") != "1" || os.Getenv("NFSDIR_E2E_CONTROLPLANE") != "1" {
		t.Skip("runs in the lab guest: make e2e-controlplane")
	}
	bin := "/work/bin"
	dir := t.TempDir()
	pki(t, dir)
	start := time.Now()
	logs := func(name string) *os.File { f, _ := os.Create(filepath.Join(dir, name+".log")); return f }
	run := func(name string, args ...string) *exec.Cmd {
		cmd := exec.Command(filepath.Join(bin, name), args...)
		f := logs(name)
		cmd.Stdout, cmd.Stderr = f, f
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd
	}
	run("etcd", "--data-dir="+filepath.Join(dir, "etcd"), "--listen-client-urls=http://127.0.0.1:2379",
		"--advertise-client-urls=http://127.0.0.1:2379", "--listen-peer-urls=http://127.0.0.1:2380",
		"--unsafe-no-fsync")
	run("kube-apiserver", "--etcd-servers=http://127.0.0.1:2379", "--advertise-address=192.0.2.10",
		"--bind-address=127.0.0.1", "--secure-port=6443", "--service-cluster-ip-range=198.51.100.0/24",
		"--tls-cert-file="+filepath.Join(dir, "apiserver.crt"), "--tls-private-key-file="+filepath.Join(dir, "apiserver.key"),
		"--client-ca-file="+filepath.Join(dir, "ca.crt"), "--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file="+filepath.Join(dir, "sa.pub"), "--service-account-signing-key-file="+filepath.Join(dir, "sa.key"),
		"--authorization-mode=Node,RBAC", "--anonymous-auth=true")
	pool := x509.NewCertPool()
	caPEM, _ := os.ReadFile(filepath.Join(dir, "ca.crt"))
	pool.AppendCertsFromPEM(caPEM)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, "GET", "https://127.0.0.1:6443/readyz", nil)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if ctx.Err() != nil {
			b, _ := os.ReadFile(filepath.Join(dir, "kube-apiserver.log"))
			if len(b) > 4000 {
				b = b[len(b)-4000:]
			}
			t.Fatalf("kube-apiserver not ready after 5 min: %v\n%s", err, b)
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("etcd + kube-apiserver /readyz after %s", time.Since(start).Round(time.Second))
}
