// Package metrics serves nfsdir's Prometheus metrics (/metrics) and an HTTP
// health endpoint (/healthz) that reflects the CSI Probe. It records what
// the gRPC layer and the domain packages report; it imports neither.
package metrics

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"
)

// Metrics holds the driver's collectors. The zero value is not usable;
// create it with New. All methods are safe for concurrent use.
type Metrics struct {
	reg          *prometheus.Registry
	calls        *prometheus.CounterVec
	latency      *prometheus.HistogramVec
	agentCalls   *prometheus.CounterVec
	agentLatency *prometheus.HistogramVec

	mu        sync.Mutex
	described []Described
}

// Described is one of nfsdir's own metrics: its name, help and labels.
type Described struct {
	Name, Help string
	Labels     []string
}

// describe records a metric nfsdir registers.
func (m *Metrics) describe(name, help string, labels ...string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.described = append(m.described, Described{Name: name, Help: help, Labels: labels})
}

// Described returns nfsdir's own metrics (not Go's and the process's), in
// the order they were registered.
func (m *Metrics) Described() []Described {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Described(nil), m.described...)
}

// Help of the metrics New registers.
const (
	callsHelp        = "CSI calls served, by method and gRPC status code."
	latencyHelp      = "Time to serve a CSI call, by method."
	agentCallsHelp   = "Calls to quota and copy agents, by agent (its endpoint, as StorageClasses name it), method and gRPC status code."
	agentLatencyHelp = "Time a call to a quota or copy agent took, connecting included, by agent and method."
)

// New returns the collectors, registered in a registry of their own with
// the Go runtime and process collectors.
func New() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nfsdir_csi_operations_total",
			Help: callsHelp,
		}, []string{"method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "nfsdir_csi_operation_duration_seconds",
			Help:    latencyHelp,
			Buckets: []float64{.001, .005, .01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120},
		}, []string{"method"}),
	}
	m.agentCalls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nfsdir_agent_calls_total",
		Help: agentCallsHelp,
	}, []string{"agent", "method", "code"})
	m.agentLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "nfsdir_agent_call_duration_seconds",
		Help:    agentLatencyHelp,
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 120, 600, 3600},
	}, []string{"agent", "method"})
	m.reg.MustRegister(m.calls, m.latency, m.agentCalls, m.agentLatency, collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.describe("nfsdir_csi_operations_total", callsHelp, "method", "code")
	m.describe("nfsdir_csi_operation_duration_seconds", latencyHelp, "method")
	m.describe("nfsdir_agent_calls_total", agentCallsHelp, "agent", "method", "code")
	m.describe("nfsdir_agent_call_duration_seconds", agentLatencyHelp, "agent", "method")
	return m
}

// ObserveCall records one CSI call: its short method name (e.g.
// "CreateVolume"), gRPC code name (e.g. "OK", "Aborted") and duration.
func (m *Metrics) ObserveCall(method, code string, d time.Duration) {
	m.calls.WithLabelValues(method, code).Inc()
	m.latency.WithLabelValues(method).Observe(d.Seconds())
}

// ObserveAgentCall records one call to an agent: its endpoint, method
// (e.g. "MakeVolume"), gRPC code name and duration. Agents are named by
// StorageClasses, so their number stays that of the classes.
func (m *Metrics) ObserveAgentCall(agent, method, code string, d time.Duration) {
	m.agentCalls.WithLabelValues(agent, method, code).Inc()
	m.agentLatency.WithLabelValues(agent, method).Observe(d.Seconds())
}

// Gauge registers a gauge whose value f returns at each scrape.
func (m *Metrics) Gauge(name, help string, f func() float64) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f))
	m.describe(name, help)
}

// Counter registers a counter whose value f returns at each scrape; f must
// never decrease.
func (m *Metrics) Counter(name, help string, f func() float64) {
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f))
	m.describe(name, help)
}

// Handler serves /metrics from the registry.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// HealthHandler serves /healthz: 200 "ok" when ready returns nil, 503 with
// the reason otherwise, as the livenessprobe sidecar does for the Probe.
func HealthHandler(ready func() error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if err := ready(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})
}

// Serve serves h on addr until ctx ends, then shuts down within 5 s. It
// returns the listening address once the listener is open, or the listen
// error; serving errors are logged.
func Serve(ctx context.Context, addr string, h http.Handler) (net.Addr, error) {
	l, err := serve(ctx, addr, h, defaultLimits)
	if err != nil {
		return nil, err
	}
	return l.Addr(), nil
}

// limits bound what HTTP clients can hold: the node plugin serves on the
// host network, where any pod may connect.
type limits struct {
	conns                     int // connections open at once; more are closed at accept
	header, read, write, idle time.Duration
	maxHeaderBytes            int
}

var defaultLimits = limits{conns: 32, header: 5 * time.Second, read: 10 * time.Second,
	write: 30 * time.Second, idle: 30 * time.Second, maxHeaderBytes: 8 << 10}

func serve(ctx context.Context, addr string, h http.Handler, lim limits) (*capListener, error) {
	tl, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	l := &capListener{Listener: tl, slots: make(chan struct{}, lim.conns)}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: lim.header, ReadTimeout: lim.read,
		WriteTimeout: lim.write, IdleTimeout: lim.idle, MaxHeaderBytes: lim.maxHeaderBytes,
	}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.Errorf("HTTP server on %s: %v", addr, err)
		}
	}()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	klog.InfoS("serving HTTP", "address", l.Addr().String(), "maxConnections", lim.conns)
	return l, nil
}

// capListener closes a new connection at once when the cap is reached,
// instead of letting it wait and hold memory.
type capListener struct {
	net.Listener
	slots chan struct{}
}

func (l *capListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.slots <- struct{}{}:
			return &slotConn{Conn: c, release: func() { <-l.slots }}, nil
		default:
			c.Close()
		}
	}
}

// open returns how many accepted connections are open.
func (l *capListener) open() int { return len(l.slots) }

type slotConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *slotConn) Close() error {
	c.once.Do(c.release)
	return c.Conn.Close()
}

// GaugeByLabel registers a gauge with one label whose values f returns at
// each scrape, one per label value; f must keep the values bounded (one
// per share, say: never one per volume).
func (m *Metrics) GaugeByLabel(name, help, label string, f func() map[string]float64) {
	m.reg.MustRegister(&labelled{desc: prometheus.NewDesc(name, help, []string{label}, nil), f: f, kind: prometheus.GaugeValue})
	m.describe(name, help, label)
}

// CounterByLabel registers a counter with one label as GaugeByLabel does
// a gauge.
func (m *Metrics) CounterByLabel(name, help, label string, f func() map[string]float64) {
	m.reg.MustRegister(&labelled{desc: prometheus.NewDesc(name, help, []string{label}, nil), f: f, kind: prometheus.CounterValue})
	m.describe(name, help, label)
}

type labelled struct {
	desc *prometheus.Desc
	f    func() map[string]float64
	kind prometheus.ValueType
}

func (l *labelled) Describe(ch chan<- *prometheus.Desc) { ch <- l.desc }

func (l *labelled) Collect(ch chan<- prometheus.Metric) {
	for v, x := range l.f() {
		ch <- prometheus.MustNewConstMetric(l.desc, l.kind, x, v)
	}
}

// Family names one counter of a CounterTable.
type Family struct{ Name, Help string }

// Row is one set of label values of a CounterTable and the value of each
// of its families there, in the families' order.
type Row struct {
	Labels []string
	Values []float64
}

// CounterTable registers counters that share their labels and are read
// together: at each scrape f is called once, and each of its rows gives
// every family's value for those label values. f must keep the rows
// bounded (per share and operation, say: never per volume); a row whose
// lengths do not match is left out.
func (m *Metrics) CounterTable(families []Family, labels []string, f func() []Row) {
	t := &table{f: f, labels: len(labels)}
	for _, fam := range families {
		t.descs = append(t.descs, prometheus.NewDesc(fam.Name, fam.Help, labels, nil))
		m.describe(fam.Name, fam.Help, labels...)
	}
	m.reg.MustRegister(t)
}

type table struct {
	descs  []*prometheus.Desc
	labels int
	f      func() []Row
}

func (t *table) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range t.descs {
		ch <- d
	}
}

func (t *table) Collect(ch chan<- prometheus.Metric) {
	for _, r := range t.f() {
		if len(r.Labels) != t.labels || len(r.Values) != len(t.descs) {
			continue
		}
		for i, d := range t.descs {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, r.Values[i], r.Labels...)
		}
	}
}
