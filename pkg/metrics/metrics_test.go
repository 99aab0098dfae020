package metrics

import (
	"context"
	"errors"
	"io"
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
	m.Gauge("nfsdir_test_gauge", "test", func() float64 { return 7 })
	m.Counter("nfsdir_test_total", "test", func() float64 { return 3 })
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{
		`nfsdir_csi_operations_total{code="OK",method="CreateVolume"} 1`,
		`nfsdir_csi_operations_total{code="Aborted",method="CreateVolume"} 1`,
		`nfsdir_csi_operation_duration_seconds_count{method="CreateVolume"} 2`,
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
