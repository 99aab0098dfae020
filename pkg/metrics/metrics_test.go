package metrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestMetricsAndHealth(t *testing.T) {
	m := New()
	m.ObserveCall("CreateVolume", "OK", 3*time.Millisecond)
	m.ObserveCall("CreateVolume", "Aborted", time.Millisecond)
	m.ObserveAgentCall("agent.example:7443", "MakeVolume", "OK", 2*time.Millisecond)
	m.ObserveAgentCall("agent.example:7443", "MakeVolume", "Unavailable", 30*time.Second)
	m.Gauge("nfsdir_test_gauge", "test", func() float64 { return 7 })
	m.Counter("nfsdir_test_total", "test", func() float64 { return 3 })
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{
		`nfsdir_csi_operations_total{code="OK",method="CreateVolume"} 1`,
		`nfsdir_csi_operations_total{code="Aborted",method="CreateVolume"} 1`,
		`nfsdir_csi_operation_duration_seconds_count{method="CreateVolume"} 2`,
		`nfsdir_agent_calls_total{agent="agent.example:7443",code="OK",method="MakeVolume"} 1`,
		`nfsdir_agent_calls_total{agent="agent.example:7443",code="Unavailable",method="MakeVolume"} 1`,
		`nfsdir_agent_call_duration_seconds_bucket{agent="agent.example:7443",method="MakeVolume",le="0.0025"} 1`,
		`nfsdir_agent_call_duration_seconds_count{agent="agent.example:7443",method="MakeVolume"} 2`,
		"nfsdir_test_gauge 7", "nfsdir_test_total 3", "go_goroutines",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	var ready error
	h := HealthHandler(func() error { return ready })
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
	if rec.Code != 200 {
		t.Errorf("healthz when ready: %d", rec.Code)
	}
	ready = errors.New("state directory is not usable")
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
	if rec.Code != 503 || !strings.Contains(rec.Body.String(), "state directory") {
		t.Errorf("healthz when not ready: %d %s", rec.Code, rec.Body)
	}
}

func TestServeStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	mux := http.NewServeMux()
	mux.Handle("/healthz", HealthHandler(func() error { return nil }))
	addr, err := Serve(ctx, "127.0.0.1:0", mux)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + addr.String() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "ok\n" {
		t.Errorf("GET /healthz = %d %q", resp.StatusCode, b)
	}
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := http.Get("http://" + addr.String() + "/healthz"); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("still serving after the context ended")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := Serve(context.Background(), "256.0.0.1:1", mux); err == nil {
		t.Error("bad address accepted")
	}
}

// TestServeBoundsConnections: a flood of connections that send nothing,
// and keep-alive connections left idle, never hold more than the cap, are
// closed by the timeouts, and a real client is served afterwards
// (4,000 idle connections are closed within 15 s).
func TestServeBoundsConnections(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mux := http.NewServeMux()
	mux.Handle("/healthz", HealthHandler(func() error { return nil }))
	lim := limits{conns: 8, header: 300 * time.Millisecond, read: time.Second, write: time.Second, idle: 300 * time.Millisecond, maxHeaderBytes: 4096}
	l, err := serve(ctx, "127.0.0.1:0", mux, lim)
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; i < 200; i++ {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	time.Sleep(100 * time.Millisecond)
	if n := l.open(); n > lim.conns {
		t.Fatalf("%d connections held, cap %d", n, lim.conns)
	}
	// Keep-alive clients that go idle.
	for i := 0; i < 4; i++ {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	}
	deadline := time.Now().Add(5 * time.Second)
	for l.open() > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := l.open(); n != 0 {
		t.Fatalf("%d connections still open after the header and idle timeouts", n)
	}
	resp, err := http.Get("http://" + l.Addr().String() + "/healthz")
	if err != nil {
		t.Fatalf("a real client after the flood: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("GET /healthz = %d", resp.StatusCode)
	}
}

func TestCounterTableReadsItsRowsOncePerScrape(t *testing.T) {
	m := New()
	reads := 0
	m.CounterTable([]Family{{"nfsdir_test_ops_total", "ops"}, {"nfsdir_test_seconds_total", "seconds"}}, []string{"share", "op"}, func() []Row {
		reads++
		return []Row{
			{Labels: []string{"h:/e", "LOOKUP"}, Values: []float64{12, 0.5}},
			{Labels: []string{"h:/e", "SYMLINK"}, Values: []float64{2, 0.25}},
			{Labels: []string{"h:/e"}, Values: []float64{1, 1}},        // too few labels
			{Labels: []string{"h:/e", "RENAME"}, Values: []float64{1}}, // too few values
		}
	})
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{
		`nfsdir_test_ops_total{op="LOOKUP",share="h:/e"} 12`, `nfsdir_test_ops_total{op="SYMLINK",share="h:/e"} 2`,
		`nfsdir_test_seconds_total{op="LOOKUP",share="h:/e"} 0.5`, `nfsdir_test_seconds_total{op="SYMLINK",share="h:/e"} 0.25`,
		"# TYPE nfsdir_test_ops_total counter",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if strings.Contains(body, "RENAME") || reads != 1 {
		t.Errorf("a malformed row was served, or the rows were read %d times:\n%s", reads, body)
	}
}
