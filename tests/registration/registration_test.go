// Package registration proves that nfsdir's node socket registers with a
// kubelet the way node-driver-registrar does it (node-driver-registrar is not
// obtainable here; the chart uses its real image). A test registrar serves
// the kubelet plugin-registration API on a socket in a plugins_registry
// directory; a client playing the kubelet discovers it, calls GetInfo, dials
// the advertised CSI endpoint and calls NodeGetInfo, then reports the
// registration status back.
package registration

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/nfsdir/nfsdir/pkg/config"
	"github.com/nfsdir/nfsdir/pkg/nfsmount/nfsmounttest"
	"github.com/nfsdir/nfsdir/tests/lab"
)

// registrar is a test stand-in for node-driver-registrar.
type registrar struct {
	registerapi.UnimplementedRegistrationServer
	driver, endpoint string
	status           chan *registerapi.RegistrationStatus
}

func (r *registrar) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: r.driver, Endpoint: r.endpoint, SupportedVersions: []string{"1.0.0"}}, nil
}

func (r *registrar) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	r.status <- s
	return &registerapi.RegistrationStatusResponse{}, nil
}

func dial(t *testing.T, socket string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("unix:"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func TestKubeletRegistersNodePlugin(t *testing.T) {
	kubelet := t.TempDir() // plays <kubeletDir>
	const driver = "nfsdir.csi.io"
	plugin := filepath.Join(kubelet, "plugins", driver)
	registry := filepath.Join(kubelet, "plugins_registry")
	os.MkdirAll(registry, 0o750)

	// The node plugin, as the DaemonSet runs it.
	m := nfsmounttest.New(t.TempDir())
	d := lab.StartDriver(t, m, func(c *config.Config) {
		c.Mode, c.NodeID, c.DriverName = config.ModeNode, "node-7", driver
		c.Endpoint = "unix://" + filepath.Join(plugin, "csi.sock")
	})

	// The registrar advertises it in plugins_registry.
	reg := &registrar{driver: driver, endpoint: d.Socket, status: make(chan *registerapi.RegistrationStatus, 1)}
	regSocket := filepath.Join(registry, driver+"-reg.sock")
	l, err := net.Listen("unix", regSocket)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	registerapi.RegisterRegistrationServer(srv, reg)
	go srv.Serve(l)
	t.Cleanup(srv.Stop)

	// The kubelet: discover sockets in plugins_registry, GetInfo, validate,
	// call the CSI node service, notify.
	ents, err := os.ReadDir(registry)
	if err != nil || len(ents) != 1 || !strings.HasSuffix(ents[0].Name(), ".sock") {
		t.Fatalf("plugins_registry: %v %v", ents, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, err := registerapi.NewRegistrationClient(dial(t, filepath.Join(registry, ents[0].Name()))).GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.Type != registerapi.CSIPlugin || info.Name != driver || info.Endpoint != filepath.Join(plugin, "csi.sock") {
		t.Fatalf("GetInfo = %+v", info)
	}
	csiConn := dial(t, info.Endpoint)
	pi, err := csi.NewIdentityClient(csiConn).GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
	if err != nil || pi.GetName() != info.Name {
		t.Fatalf("GetPluginInfo over the advertised endpoint: %v %v", pi, err)
	}
	ni, err := csi.NewNodeClient(csiConn).NodeGetInfo(ctx, &csi.NodeGetInfoRequest{})
	if err != nil || ni.GetNodeId() != "node-7" {
		t.Fatalf("NodeGetInfo = %v, %v", ni, err)
	}
	caps, err := csi.NewIdentityClient(csiConn).GetPluginCapabilities(ctx, &csi.GetPluginCapabilitiesRequest{})
	if err != nil || len(caps.GetCapabilities()) != 0 {
		t.Errorf("node-only plugin advertises %v (%v)", caps, err)
	}
	if _, err := registerapi.NewRegistrationClient(dial(t, regSocket)).NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatal(err)
	}
	if s := <-reg.status; !s.PluginRegistered {
		t.Errorf("registration status %+v", s)
	}
}
