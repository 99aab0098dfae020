package k8s

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// labPKI is the lab cluster's certificate authority, generated per run
// (ECDSA P-256: quick even under emulation). Files go into dir.
type labPKI struct {
	dir    string
	ca     *x509.Certificate
	key    *ecdsa.PrivateKey
	serial int64
}

// newPKI creates the CA (ca.crt), the API server's serving certificate
// (apiserver.crt/.key) and the service-account key pair (sa.key/.pub).
func newPKI(t *testing.T, dir string) *labPKI {
	t.Helper()
	p := &labPKI{dir: dir, key: newKey(t)}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "nfsdir-lab-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &p.key.PublicKey, p.key)
	if err != nil {
		t.Fatal(err)
	}
	if p.ca, err = x509.ParseCertificate(der); err != nil {
		t.Fatal(err)
	}
	p.write(t, "ca.crt", "CERTIFICATE", der)
	p.writeKey(t, "ca.key", p.key)
	p.issue(t, "apiserver", &x509.Certificate{Subject: pkix.Name{CommonName: "kube-apiserver"},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("192.0.2.10"), net.ParseIP("198.51.100.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	sa := newKey(t)
	p.writeKey(t, "sa.key", sa)
	pub, _ := x509.MarshalPKIXPublicKey(&sa.PublicKey)
	p.write(t, "sa.pub", "PUBLIC KEY", pub)
	return p
}

// loadPKI reads the CA of newPKI from dir (ca.crt, ca.key); certificates
// it issues go to out, their serials apart from those made in dir.
func loadPKI(t *testing.T, dir, out string) *labPKI {
	t.Helper()
	block := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		der, _ := pem.Decode(b)
		if der == nil {
			t.Fatalf("%s: no PEM block", name)
		}
		return der.Bytes
	}
	ca, err := x509.ParseCertificate(block("ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	key, err := x509.ParsePKCS8PrivateKey(block("ca.key"))
	if err != nil {
		t.Fatal(err)
	}
	k, ok := key.(*ecdsa.PrivateKey)
	if !ok {
		t.Fatalf("ca.key: %T, not ECDSA", key)
	}
	return &labPKI{dir: out, ca: ca, key: k, serial: 10000}
}

// retarget makes the kubeconfig at path name the API server at server.
func retarget(t *testing.T, path, server string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(b), "https://127.0.0.1:443", server, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func (p *labPKI) write(t *testing.T, name, typ string, der []byte) {
	if err := os.WriteFile(filepath.Join(p.dir, name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func (p *labPKI) writeKey(t *testing.T, name string, k *ecdsa.PrivateKey) []byte {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	p.write(t, name, "PRIVATE KEY", der)
	return der
}

// issue signs tmpl with a new key and writes name.crt and name.key; it
// returns both in DER.
func (p *labPKI) issue(t *testing.T, name string, tmpl *x509.Certificate) (cert, key []byte) {
	t.Helper()
	p.serial++
	tmpl.SerialNumber = big.NewInt(100 + p.serial)
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	k := newKey(t)
	cert, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &k.PublicKey, p.key)
	if err != nil {
		t.Fatal(err)
	}
	p.write(t, name+".crt", "CERTIFICATE", cert)
	return cert, p.writeKey(t, name+".key", k)
}

// kubeconfig issues a client certificate for cn (in group org, if any) and
// writes name.kubeconfig for the API server on 127.0.0.1:443.
func (p *labPKI) kubeconfig(t *testing.T, name, cn, org string) string {
	t.Helper()
	subj := pkix.Name{CommonName: cn}
	if org != "" {
		subj.Organization = []string{org}
	}
	cert, key := p.issue(t, name, &x509.Certificate{Subject: subj, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	b64 := func(typ string, der []byte) string {
		return base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}))
	}
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: lab
  cluster:
    server: https://127.0.0.1:443
    certificate-authority-data: %s
users:
- name: %s
  user:
    client-certificate-data: %s
    client-key-data: %s
contexts:
- name: lab
  context: {cluster: lab, user: %s}
current-context: lab
`, b64("CERTIFICATE", p.ca.Raw), name, b64("CERTIFICATE", cert), b64("PRIVATE KEY", key), name)
	path := filepath.Join(p.dir, name+".kubeconfig")
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
