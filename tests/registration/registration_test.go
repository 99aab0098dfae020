// Package registration runs nfsdir's node plugin with the real
// node-driver-registrar and livenessprobe (built from their release sources
// by tests/k8s/sidecars/build-release.sh; make unit puts them in
// NFSDIR_SIDECARS), as the chart's DaemonSet does, and plays the kubelet:
// it discovers the registrar's socket in plugins_registry, takes its
// GetInfo, calls the advertised CSI endpoint and reports the registration
// back; and it asks livenessprobe's /healthz, which answers from the
// driver's Probe.
package registration

import (
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"sigs.k8s.io/yaml"

	"github.com/nfsdir/nfsdir/pkg/config"
	"github.com/nfsdir/nfsdir/pkg/nfsmount/nfsmounttest"
	"github.com/nfsdir/nfsdir/tests/lab"
)

const driver = "nfsdir.csi.io"

// sidecar is a running sidecar program; it is killed when the test ends.
type sidecar struct {
	cmd  *exec.Cmd
	log  *strings.Builder
	done chan struct{} // closed when it has exited, with err set
	err  error
}

// startSidecar runs the named sidecar program from NFSDIR_SIDECARS (or
// PATH) with args.
func startSidecar(t *testing.T, name string, args ...string) *sidecar {
	t.Helper()
	path := filepath.Join(os.Getenv("NFSDIR_SIDECARS"), name)
	if _, err := os.Stat(path); err != nil || os.Getenv("NFSDIR_SIDECARS") == "" {
		if path, err = exec.LookPath(name); err != nil {
			t.Fatalf("%s is needed: make unit builds it into bin/k8s and sets NFSDIR_SIDECARS (%v)", name, err)
		}
	}
	s := &sidecar{cmd: exec.Command(path, args...), log: &strings.Builder{}, done: make(chan struct{})}
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.err = s.cmd.Wait(); close(s.done) }()
	t.Cleanup(func() {
		s.cmd.Process.Kill()
		<-s.done
		if t.Failed() {
			t.Logf("%s's log:\n%s", name, s.log)
		}
	})
	return s
}

// freeAddress returns a loopback address with a port nothing listens on.
func freeAddress(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// healthz returns the status code of http://addr/healthz once the server
// answers, within a minute.
func healthz(t *testing.T, addr string) int {
	t.Helper()
	client := &http.Client{Timeout: 15 * time.Second}
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := client.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			return resp.StatusCode
		}
		if time.Now().After(deadline) {
			t.Fatalf("healthz on %s: %v", addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
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

// nodePlugin starts nfsdir's node plugin on <kubelet>/plugins/<driver>/csi.sock.
func nodePlugin(t *testing.T, kubelet string) *lab.Driver {
	plugin := filepath.Join(kubelet, "plugins", driver)
	return lab.StartDriver(t, nfsmounttest.New(t.TempDir()), func(c *config.Config) {
		c.Mode, c.NodeID, c.DriverName = config.ModeNode, "node-7", driver
		c.Endpoint = "unix://" + filepath.Join(plugin, "csi.sock")
	})
}

// registrarSocket waits for the registrar's socket in plugins_registry.
func registrarSocket(t *testing.T, registry string, r *sidecar) string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		ents, _ := os.ReadDir(registry)
		if len(ents) == 1 && strings.HasSuffix(ents[0].Name(), ".sock") {
			return filepath.Join(registry, ents[0].Name())
		}
		if len(ents) > 1 {
			t.Fatalf("plugins_registry holds %v", ents)
		}
		select {
		case <-r.done:
			t.Fatalf("node-driver-registrar exited before it registered: %v", r.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no registration socket in %s after a minute", registry)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestKubeletRegistersNodePlugin(t *testing.T) {
	kubelet := t.TempDir() // plays <kubeletDir>
	registry := filepath.Join(kubelet, "plugins_registry")
	os.MkdirAll(registry, 0o750)
	d := nodePlugin(t, kubelet)
	health := freeAddress(t)
	reg := startSidecar(t, "csi-node-driver-registrar", "--csi-address="+d.Socket,
		"--kubelet-registration-path="+d.Socket, "--plugin-registration-path="+registry,
		"--http-endpoint="+health, "--v=5")

	// The kubelet: discover the socket, GetInfo, validate, call the CSI
	// node service, notify.
	regSocket := registrarSocket(t, registry, reg)
	if got := filepath.Base(regSocket); got != driver+"-reg.sock" {
		t.Errorf("registration socket %s", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	regClient := registerapi.NewRegistrationClient(dial(t, regSocket))
	// The socket is there from its bind, a moment before the registrar
	// listens on it: the first call waits for the connection, as the
	// kubelet's retries do.
	info, err := regClient.GetInfo(ctx, &registerapi.InfoRequest{}, grpc.WaitForReady(true))
	if err != nil {
		t.Fatal(err)
	}
	if info.Type != registerapi.CSIPlugin || info.Name != driver || info.Endpoint != d.Socket {
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
	if _, err := regClient.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatal(err)
	}
	// The registrar's health check (what the chart's probes ask) passes
	// while its registration socket is there, and it keeps serving.
	if code := healthz(t, health); code != http.StatusOK {
		t.Errorf("registrar healthz: %d", code)
	}
	select {
	case <-reg.done:
		t.Fatalf("node-driver-registrar exited after a successful registration: %v", reg.err)
	case <-time.After(time.Second):
	}

	// A failed registration makes the registrar exit, so that kubelet
	// restarts the container and registers it again.
	if _, err := regClient.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: false, Error: "version mismatch"}); err != nil && !strings.Contains(err.Error(), "Unavailable") {
		t.Fatal(err)
	}
	select {
	case <-reg.done:
		if reg.err == nil {
			t.Error("node-driver-registrar exited 0 after a failed registration")
		}
	case <-time.After(30 * time.Second):
		t.Error("node-driver-registrar still runs 30 s after a failed registration")
	}
}

func TestLivenessProbeAnswersFromProbe(t *testing.T) {
	d := nodePlugin(t, t.TempDir())
	addr := freeAddress(t)
	startSidecar(t, "livenessprobe", "--csi-address="+d.Socket, "--probe-timeout=10s", "--http-endpoint="+addr, "--v=5")
	if code := healthz(t, addr); code != http.StatusOK {
		t.Fatalf("healthz of a serving driver: %d", code)
	}
	d.Stop()
	if code := healthz(t, addr); code == http.StatusOK {
		t.Errorf("healthz of a stopped driver: %d", code)
	} else {
		t.Logf("healthz of a stopped driver: %d", code)
	}
}

// slowDriver serves a CSI identity on socket whose GetPluginInfo answers
// after delay, as a node plugin does while its node is loaded (the chart's
// pods all start at once after an upgrade).
func slowDriver(t *testing.T, socket string, delay time.Duration) {
	t.Helper()
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	csi.RegisterIdentityServer(srv, &slowIdentity{delay: delay})
	go srv.Serve(l)
	t.Cleanup(srv.Stop)
}

type slowIdentity struct {
	csi.UnimplementedIdentityServer
	delay time.Duration
}

func (s *slowIdentity) GetPluginInfo(ctx context.Context, _ *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return &csi.GetPluginInfoResponse{Name: driver, VendorVersion: "slow"}, nil
}

// chartRegistrarTimeout is node.registrarTimeout of the chart's values:
// how long the chart's node-driver-registrar waits for the driver's name.
func chartRegistrarTimeout(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../charts/nfsdir/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Node struct {
			RegistrarTimeout string `json:"registrarTimeout"`
		} `json:"node"`
	}
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	if v.Node.RegistrarTimeout == "" {
		t.Fatal("the chart's values set no node.registrarTimeout")
	}
	return v.Node.RegistrarTimeout
}

// TestTheChartsRegistrarWaitsForABusyDriver: node-driver-registrar asks
// the driver its name once at start and exits when the answer takes longer
// than its --timeout (1 s by default), so on a busy node kubelet restarts
// it. With the chart's node.registrarTimeout it waits for a driver that
// takes 3 s and registers it; with the default it exits.
func TestTheChartsRegistrarWaitsForABusyDriver(t *testing.T) {
	for _, c := range []struct {
		name    string
		args    []string
		survive bool
	}{
		{"chart", []string{"--timeout=" + chartRegistrarTimeout(t)}, true},
		{"default", nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			kubelet := t.TempDir()
			registry := filepath.Join(kubelet, "plugins_registry")
			os.MkdirAll(registry, 0o750)
			socket := filepath.Join(kubelet, "csi.sock")
			slowDriver(t, socket, 3*time.Second)
			reg := startSidecar(t, "csi-node-driver-registrar", append([]string{"--csi-address=" + socket,
				"--kubelet-registration-path=" + socket, "--plugin-registration-path=" + registry, "--v=5"}, c.args...)...)
			if !c.survive {
				select {
				case <-reg.done:
					if reg.err == nil {
						t.Fatal("the registrar exited 0 on a driver slower than its timeout")
					}
				case <-time.After(30 * time.Second):
					t.Fatal("the registrar with its default timeout waited 30 s for a driver that answers in 3 s")
				}
				return
			}
			regSocket := registrarSocket(t, registry, reg)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			info, err := registerapi.NewRegistrationClient(dial(t, regSocket)).GetInfo(ctx, &registerapi.InfoRequest{}, grpc.WaitForReady(true))
			if err != nil || info.Name != driver {
				t.Fatalf("GetInfo = %+v, %v", info, err)
			}
		})
	}
}
