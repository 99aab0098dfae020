package docs

import (
	"context"
	"crypto/tls"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/nfsdir/nfsdir/pkg/serveragent"
)

// TestAgentCertificatesFromThePage: the openssl commands of
// capacity-and-quotas.md, run as written, make a controller certificate
// the agent accepts and an agent certificate the controller accepts for
// the host name it names, with the roles' default identities; each used
// in the other's place is refused.
func TestAgentCertificatesFromThePage(t *testing.T) {
	dir := runDoc(t, "docs/capacity-and-quotas.md", "agent-certificates")
	files := func(name string) serveragent.Files {
		return serveragent.Files{Cert: filepath.Join(dir, name+".crt"), Key: filepath.Join(dir, name+".key"), CA: filepath.Join(dir, "ca.crt")}
	}
	const host = "nfs-node-1.example.com"
	ids := serveragent.Identities{Controllers: []string{"urn:nfsdir:controller"}}
	for _, c := range []struct {
		name          string
		agent, caller string
		host          string
		ok            bool
	}{
		{"the agent and the controller", "agent", "controller", host, true},
		{"another host name", "agent", "controller", "nfs-node-2.example.com", false},
		{"the controller's certificate serving as the agent", "controller", "controller", host, false},
		{"the agent's certificate calling as the controller", "agent", "agent", host, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			server, err := serveragent.ServerTLS(files(c.agent), ids)
			if err != nil {
				t.Fatal(err)
			}
			client, err := serveragent.ClientTLS(files(c.caller), "urn:nfsdir:agent")
			if err != nil {
				t.Fatal(err)
			}
			client.ServerName = c.host
			serr, cerr := handshake(t, server, client)
			if ok := serr == nil && cerr == nil; ok != c.ok {
				t.Errorf("handshake: agent %v, controller %v; want it to succeed: %v", serr, cerr, c.ok)
			}
		})
	}
}

// handshake runs a TLS handshake between server and client over loopback
// and returns each side's error; the client then reads, so that a
// certificate the server refuses after the client's part (TLS 1.3) shows.
func handshake(t *testing.T, server, client *tls.Config) (error, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	serr := make(chan error, 1)
	go func() {
		conn, err := l.Accept()
		if err != nil {
			serr <- err
			return
		}
		defer conn.Close()
		s := tls.Server(conn, server)
		if err := s.HandshakeContext(ctx); err != nil {
			serr <- err
			return
		}
		_, err = s.Write([]byte{1})
		serr <- err
	}()
	conn, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	c := tls.Client(conn, client)
	cerr := c.HandshakeContext(ctx)
	if cerr == nil {
		_, cerr = c.Read(make([]byte, 1))
	}
	return <-serr, cerr
}
