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
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CertFiles are a certificate and its key, PEM files.
type CertFiles struct{ Cert, Key string }

// PKI is a test CA (its certificate in CA) with a server certificate for
// 127.0.0.1 and a client certificate.
type PKI struct {
	CA             string
	Server, Client CertFiles
}

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
	issue := func(name string, usage x509.ExtKeyUsage, ips ...net.IP) (CertFiles, error) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{usage},
			KeyUsage: x509.KeyUsageDigitalSignature, IPAddresses: ips}
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
	if p.Server, err = issue("agent", x509.ExtKeyUsageServerAuth, net.ParseIP("127.0.0.1")); err != nil {
		return PKI{}, err
	}
	p.Client, err = issue("nfsdir-controller", x509.ExtKeyUsageClientAuth)
	return p, err
}

func writePEM(path, kind string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600)
}
