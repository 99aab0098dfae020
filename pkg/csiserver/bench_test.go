package csiserver

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/nfsdir/nfsdir/pkg/config"
	"github.com/nfsdir/nfsdir/pkg/nfsmount/nfsmounttest"
)

// startFake serves a driver in mode all on a fake mounter and returns a
// connection to it.
func startFake(tb testing.TB) (*grpc.ClientConn, *nfsmounttest.Fake) {
	conn, m, _ := startFakeWith(tb, nil)
	return conn, m
}

// startFakeWith starts a driver on a fake mounter with the config changed
// by mutate, and returns the client connection, the mounter and the
// driver's socket path.
func startFakeWith(tb testing.TB, mutate func(*config.Config), hooks ...func(*Driver)) (*grpc.ClientConn, *nfsmounttest.Fake, string) {
	dir := tb.TempDir()
	m := nfsmounttest.New(filepath.Join(dir, "nfs"))
	if err := os.MkdirAll(m.ExportDir("nfs.example", "/export"), 0o755); err != nil {
		tb.Fatal(err)
	}
	cfg := config.Default()
	cfg.NodeID, cfg.StateDir, cfg.Version = "n", filepath.Join(dir, "state"), "test"
	cfg.Endpoint = "unix://" + filepath.Join(dir, "csi.sock")
	cfg.PublishRoot = os.TempDir() // tests publish on t.TempDir() targets
	if mutate != nil {
		mutate(&cfg)
	}
	d, err := New(cfg, m)
	if err != nil {
		tb.Fatal(err)
	}
	for _, h := range hooks {
		h(d)
	}
	l, err := Listen(cfg.Endpoint)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.Serve(ctx, l); close(done) }()
	conn, err := grpc.NewClient("unix:"+l.Addr().(*net.UnixAddr).Name, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close(); cancel(); <-done })
	return conn, m, l.Addr().(*net.UnixAddr).Name
}

var rwx = mountCap(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER)

// BenchmarkCreateVolume measures the CPU cost of CreateVolume on the host,
// end to end through gRPC, with the share on a local directory.
func BenchmarkCreateVolume(b *testing.B) {
	conn, _ := startFake(b)
	ctl := csi.NewControllerClient(conn)
	params := map[string]string{"server": "nfs.example", "share": "/export"}
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := ctl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: fmt.Sprint("pvc-", i), Parameters: params,
			VolumeCapabilities: []*csi.VolumeCapability{rwx}}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGRPCRoundTrip is the floor under every call.
func BenchmarkGRPCRoundTrip(b *testing.B) {
	conn, _ := startFake(b)
	ctl := csi.NewControllerClient(conn)
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		if _, err := ctl.ControllerGetCapabilities(ctx, &csi.ControllerGetCapabilitiesRequest{}); err != nil {
			b.Fatal(err)
		}
	}
}
