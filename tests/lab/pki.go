package lab

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CertFiles are a certificate and its key, PEM files.
type CertFiles struct{ Cert, Key string }

// PKI is a test CA (its certificate in CA) with an agent's server
// certificate for 127.0.0.1 (identity urn:nfsdir:agent) and a
// controller's client certificate (urn:nfsdir:controller), as the agent
// and the controller expect by default.
type PKI struct {
	CA             string
	Server, Client CertFiles
	// Issue signs a further certificate from tmpl (subject, usages,
	// names; a validity of a day unless it sets NotAfter) with the CA,
	// written as name.crt and name.key.
	Issue func(name string, tmpl *x509.Certificate) (CertFiles, error)
}

// Lab identities: the agent's and the controller's defaults.
var (
	AgentURI      = &url.URL{Scheme: "urn", Opaque: "nfsdir:agent"}
	ControllerURI = &url.URL{Scheme: "urn", Opaque: "nfsdir:controller"}
)

// NewPKI makes a PKI in a directory of the test's.
func NewPKI(t testing.TB) PKI {
	t.Helper()
	p, err := MakePKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// MakePKI makes a PKI in dir.
func MakePKI(dir string) (PKI, error) {
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "lab quota CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return PKI{}, err
	}
	caCert, _ := x509.ParseCertificate(caDER)
	p := PKI{CA: filepath.Join(dir, "ca.crt")}
	if err := writePEM(p.CA, "CERTIFICATE", caDER); err != nil {
		return PKI{}, err
	}
	p.Issue = func(name string, tmpl *x509.Certificate) (CertFiles, error) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl.SerialNumber, tmpl.KeyUsage = big.NewInt(time.Now().UnixNano()), x509.KeyUsageDigitalSignature
		if tmpl.NotAfter.IsZero() { // a template may ask for an expired certificate
			tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
		}
		if tmpl.Subject.CommonName == "" {
			tmpl.Subject = pkix.Name{CommonName: name}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			return CertFiles{}, err
		}
		kder, _ := x509.MarshalPKCS8PrivateKey(key)
		f := CertFiles{Cert: filepath.Join(dir, name+".crt"), Key: filepath.Join(dir, name+".key")}
		if err := writePEM(f.Cert, "CERTIFICATE", der); err != nil {
			return CertFiles{}, err
		}
		return f, writePEM(f.Key, "PRIVATE KEY", kder)
	}
	if p.Server, err = p.Issue("agent", &x509.Certificate{ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, URIs: []*url.URL{AgentURI}}); err != nil {
		return PKI{}, err
	}
	p.Client, err = p.Issue("nfsdir-controller", &x509.Certificate{ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, URIs: []*url.URL{ControllerURI}})
	return p, err
}

func writePEM(path, kind string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600)
}
