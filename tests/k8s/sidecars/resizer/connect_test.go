package resizer

import (
	"context"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/connection"
	"google.golang.org/grpc"
)

// How the controller's sidecars connect to the driver, with the very
// connection library and gRPC versions csi-resizer is built with here
// (csi-provisioner and csi-snapshotter use the same library the same way):
// the sidecar exits on a "lost" connection, and its first connection is
// lost when the driver's HTTP/2 handshake reaches it later than about a
// second after it dialled. The library gives gRPC no minimum connect
// timeout, so the deadline for the dial, the handshake and the client's
// bookkeeping after it is gRPC's first back-off, 1 s ± 20%; at the
// deadline the client closes the connection itself, dials again, and the
// library takes the second dial for a lost connection. This is why the
// chart starts the controller's containers one after another.

// identity answers Probe and GetPluginInfo.
type identity struct {
	csi.UnimplementedIdentityServer
}

func (identity) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: "nfsdir.csi.io", VendorVersion: "test"}, nil
}

func (identity) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{}, nil
}

// lateListener holds back the first write on the first accepted
// connection (the server's HTTP/2 settings) by delay: a driver process
// that a busy node keeps off the CPU that long while the sidecar dials it.
type lateListener struct {
	net.Listener
	delay    time.Duration
	accepted atomic.Int32
}

func (l *lateListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil || l.accepted.Add(1) > 1 {
		return c, err
	}
	return &lateConn{Conn: c, delay: l.delay}, nil
}

type lateConn struct {
	net.Conn
	delay time.Duration
	once  sync.Once
}

func (c *lateConn) Write(b []byte) (int, error) {
	c.once.Do(func() { time.Sleep(c.delay) })
	return c.Conn.Write(b)
}

// connectAndProbe serves the identity service with handshakes held back
// by delay, connects as the sidecars do, probes, and reports whether the
// library saw the connection lost within the next watch.
func connectAndProbe(t *testing.T, delay, watch time.Duration) bool {
	sock := filepath.Join(t.TempDir(), "csi.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	csi.RegisterIdentityServer(srv, identity{})
	go srv.Serve(&lateListener{Listener: l, delay: delay})
	defer srv.Stop()

	lost := make(chan struct{}, 1)
	onLoss := func(context.Context) bool {
		select {
		case lost <- struct{}{}:
		default:
		}
		return true // reconnect, where the sidecars exit
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := connection.Connect(ctx, "unix://"+sock, nil, connection.OnConnectionLoss(onLoss))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close()
	if _, err := csi.NewIdentityClient(conn).Probe(ctx, &csi.ProbeRequest{}); err != nil {
		t.Fatalf("probe: %v", err)
	}
	select {
	case <-lost:
		return true
	case <-time.After(watch):
		return false
	}
}

// TestALateHandshakeLosesTheSidecarsConnection: a driver whose first
// handshake answers 1.5 s after the dial is reached in the end (the probe
// passes), but only after the library reported the first connection lost,
// which the sidecars answer by exiting. One that answers at once is never
// lost.
func TestALateHandshakeLosesTheSidecarsConnection(t *testing.T) {
	if !connectAndProbe(t, 1500*time.Millisecond, 5*time.Second) {
		t.Error("a handshake 1.5 s late: the connection was not reported lost")
	}
	if connectAndProbe(t, 0, 3*time.Second) {
		t.Error("a prompt handshake: the connection was reported lost")
	}
}
