package serveragent_test

import (
	"context"
	"crypto/x509"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nfsdir/nfsdir/pkg/provision"
	"github.com/nfsdir/nfsdir/pkg/serveragent"
	"github.com/nfsdir/nfsdir/tests/lab"
)

var readerURI = &url.URL{Scheme: "urn", Opaque: "nfsdir:reader"}

// agentWith serves an agent (one export, for copies only)
// with the server certificate server of pki, pinning ids, and returns its
// endpoint.
func agentWith(t *testing.T, pki lab.PKI, server lab.CertFiles, ids serveragent.Identities) string {
	t.Helper()
	return serve(t, serveragent.Config{FirstProject: 100, LastProject: 200, CopyExports: []serveragent.Export{{Share: "/e", Dir: t.TempDir()}}}, pki, server, ids)
}

// clientOf dials endpoint with the client certificate f.
func clientOf(t *testing.T, pki lab.PKI, f lab.CertFiles, endpoint string) *serveragent.Client {
	t.Helper()
	cfg, err := serveragent.ClientTLS(serveragent.Files{Cert: f.Cert, Key: f.Key, CA: pki.CA}, serveragent.DefaultAgentIdentity)
	if err != nil {
		t.Fatal(err)
	}
	cl, closeIt, err := serveragent.Dial(endpoint, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeIt() })
	return cl
}

func issue(t *testing.T, pki lab.PKI, name string, tmpl *x509.Certificate) lab.CertFiles {
	t.Helper()
	f, err := pki.Issue(name, tmpl)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func probe(cl *serveragent.Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return cl.Probe(ctx)
}

// The agent takes a certificate of its CA only when it is marked for
// client authentication and holds an identity pinned to a role, and lets
// each role call only its methods.
func TestAgentAuthorizesByPinnedIdentityNotByCA(t *testing.T) {
	pki := lab.NewPKI(t)
	ids := serveragent.Identities{Controllers: []string{serveragent.DefaultControllerIdentity}, Readers: []string{readerURI.String()}}
	endpoint := agentWith(t, pki, pki.Server, ids)
	clientAuth := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	for _, tt := range []struct {
		what string
		cert *x509.Certificate
	}{
		{"a certificate of the CA with no identity", &x509.Certificate{ExtKeyUsage: clientAuth, DNSNames: []string{"some-workload.example"}}},
		{"the controller's identity without an extended key usage", &x509.Certificate{URIs: []*url.URL{lab.ControllerURI}}},
		{"the controller's identity marked for servers only", &x509.Certificate{ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, URIs: []*url.URL{lab.ControllerURI}}},
		{"the agents' identity", &x509.Certificate{ExtKeyUsage: clientAuth, URIs: []*url.URL{lab.AgentURI}}},
	} {
		f := issue(t, pki, "stranger", tt.cert)
		if err := probe(clientOf(t, pki, f, endpoint)); err == nil {
			t.Errorf("%s: the agent answered", tt.what)
		}
	}
	if err := probe(clientOf(t, pki, pki.Client, endpoint)); err != nil {
		t.Errorf("the controller: %v", err)
	}
	reader := clientOf(t, pki, issue(t, pki, "reader", &x509.Certificate{ExtKeyUsage: clientAuth, URIs: []*url.URL{readerURI}}), endpoint)
	if err := probe(reader); err != nil {
		t.Errorf("a reader's Probe: %v", err)
	}
	ctx := context.Background()
	v := &serveragent.Volume{Share: "/e", SubDir: "pvc-1", Token: "abcdefgh"}
	if _, err := reader.Get(ctx, v); status.Code(err) == codes.PermissionDenied {
		t.Errorf("a reader's Get: %v", err)
	}
	for method, err := range map[string]error{
		"Set":          func() error { _, err := reader.Set(ctx, &serveragent.SetRequest{Volume: *v, Bytes: 1}); return err }(),
		"Clear":        reader.Clear(ctx, v),
		"MakeVolume":   func() error { _, err := reader.MakeVolume(ctx, &provision.RemoteMake{}); return err }(),
		"RemoveVolume": func() error { _, err := reader.RemoveVolume(ctx, &provision.RemoteRemove{}); return err }(),
		"Copy":         func() error { _, err := reader.Copy(ctx, &provision.RemoteCopy{}); return err }(),
	} {
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("a reader's %s: %v, want PermissionDenied", method, err)
		}
	}
}

// The controller takes an agent only when its certificate holds the
// agents' identity and is marked for server authentication: another
// certificate of the CA for the agent's address does not pass for one.
func TestControllerPinsTheAgentsIdentity(t *testing.T) {
	pki := lab.NewPKI(t)
	ids := serveragent.Identities{Controllers: []string{serveragent.DefaultControllerIdentity}}
	serverAuth := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	loopback := []net.IP{net.ParseIP("127.0.0.1")}
	for _, tt := range []struct {
		what string
		cert *x509.Certificate
	}{
		{"a server certificate of the CA without the agents' identity", &x509.Certificate{ExtKeyUsage: serverAuth, IPAddresses: loopback}},
		{"the agents' identity without an extended key usage", &x509.Certificate{IPAddresses: loopback, URIs: []*url.URL{lab.AgentURI}}},
	} {
		endpoint := agentWith(t, pki, issue(t, pki, "impostor", tt.cert), ids)
		if err := probe(clientOf(t, pki, pki.Client, endpoint)); err == nil {
			t.Errorf("%s: the controller took it for an agent", tt.what)
		}
	}
	if err := probe(clientOf(t, pki, pki.Client, agentWith(t, pki, pki.Server, ids))); err != nil {
		t.Errorf("the agent: %v", err)
	}
}

// Errors name the agent's directories by their shares: a caller learns
// nothing of the server's layout.
func TestAgentErrorsKeepItsPathsToItself(t *testing.T) {
	dir := t.TempDir()
	local := filepath.Join(dir, "srv", "export")
	if err := os.MkdirAll(local, 0o755); err != nil {
		t.Fatal(err)
	}
	pool, endpoint := serveAgent(t, serveragent.Config{CopyExports: []serveragent.Export{{Share: "/e", Dir: local}}, FirstProject: 1, LastProject: 9})
	if err := os.RemoveAll(local); err != nil { // the export root is gone: its open fails
		t.Fatal(err)
	}
	_, err := pool.CopyTree(context.Background(), endpoint, provision.RemoteCopy{Share: "/e",
		Src: provision.CopyDir{SubDir: "a", Token: "abcdefgh"}, Dst: provision.CopyDir{SubDir: "b", Token: "abcdefgh"}})
	if err == nil || strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "<share /e>") {
		t.Errorf("the agent's error: %v; want its directory named as share /e, not %s", err, local)
	}
}
