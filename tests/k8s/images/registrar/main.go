// Command registrar stands in for node-driver-registrar (not obtainable
// here) in the end-to-end lab. It takes the flags the chart passes
// (--csi-address, --kubelet-registration-path, --v, and
// --mode=kubelet-registration-probe for its liveness probe), asks the driver
// for its name, and serves the kubelet plugin-registration API on
// /registration/<driver>-reg.sock, advertising the registration path. It
// exits when the kubelet reports a failed registration, as the real one does.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

const registrationDir = "/registration"

func main() {
	addr := flag.String("csi-address", "/csi/csi.sock", "CSI socket of the driver, in this container")
	regPath := flag.String("kubelet-registration-path", "", "CSI socket of the driver, as the kubelet sees it")
	mode := flag.String("mode", "registration", "registration, or kubelet-registration-probe")
	flag.Int("v", 0, "log verbosity (accepted, unused)")
	flag.Parse()
	if *regPath == "" {
		log.Fatal("--kubelet-registration-path is required")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	name, err := driverName(ctx, *addr)
	cancel()
	if err != nil {
		log.Fatal(err)
	}
	sock := filepath.Join(registrationDir, name+"-reg.sock")
	if *mode == "kubelet-registration-probe" {
		if _, err := os.Stat(sock); err != nil {
			log.Fatalf("not registered: %v", err)
		}
		return
	}
	if err := serve(sock, name, *regPath); err != nil {
		log.Fatal(err)
	}
}

// driverName asks the driver for its name, retrying until it answers.
func driverName(ctx context.Context, addr string) (string, error) {
	conn, err := grpc.NewClient("unix:"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return "", err
	}
	defer conn.Close()
	for {
		info, err := csi.NewIdentityClient(conn).GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
		if err == nil {
			return info.GetName(), nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("driver at %s does not answer: %v", addr, err)
		case <-time.After(time.Second):
		}
	}
}

type server struct {
	registerapi.UnimplementedRegistrationServer
	name, endpoint string
}

func (s *server) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: s.name, Endpoint: s.endpoint, SupportedVersions: []string{"1.0.0"}}, nil
}

func (s *server) NotifyRegistrationStatus(_ context.Context, st *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	if !st.PluginRegistered {
		log.Printf("kubelet refused the registration: %s", st.Error)
		os.Exit(1)
	}
	log.Printf("registered %s with the kubelet", s.name)
	return &registerapi.RegistrationStatusResponse{}, nil
}

func serve(sock, name, endpoint string) error {
	os.Remove(sock)
	l, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	srv := grpc.NewServer()
	registerapi.RegisterRegistrationServer(srv, &server{name: name, endpoint: endpoint})
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() { <-sig; srv.Stop(); os.Remove(sock) }()
	log.Printf("serving registration of %s (endpoint %s) on %s", name, endpoint, sock)
	return srv.Serve(l)
}
