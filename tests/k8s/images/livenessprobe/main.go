// Command livenessprobe stands in for the kubernetes-csi livenessprobe
// sidecar (not obtainable here) in the end-to-end lab. It takes the flags the
// chart passes (--csi-address, --probe-timeout, --http-endpoint, --v) and
// serves /healthz: 200 when the driver's CSI Probe answers ready within the
// timeout, 500 otherwise.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func main() {
	addr := flag.String("csi-address", "/csi/csi.sock", "CSI socket")
	timeout := flag.Duration("probe-timeout", time.Second, "Probe timeout")
	endpoint := flag.String("http-endpoint", ":9808", "where to serve /healthz")
	flag.Int("v", 0, "log verbosity (accepted, unused)")
	flag.Parse()
	conn, err := grpc.NewClient("unix:"+*addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	http.Handle("/healthz", handler(csi.NewIdentityClient(conn), *timeout))
	log.Fatal(http.ListenAndServe(*endpoint, nil))
}

// handler answers /healthz from the CSI Probe.
func handler(id csi.IdentityClient, timeout time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		resp, err := id.Probe(ctx, &csi.ProbeRequest{})
		switch {
		case err != nil:
			http.Error(w, fmt.Sprintf("probe failed: %v", err), http.StatusInternalServerError)
		case resp.GetReady() != nil && !resp.GetReady().GetValue():
			http.Error(w, "driver not ready", http.StatusInternalServerError)
		default:
			w.Write([]byte("ok"))
		}
	})
}
