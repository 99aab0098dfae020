package serveragent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/grpcstatus"
)

// Files are the PEM files of one side of the mutual TLS: its certificate
// and key, and the CA that signs the other side's certificates. They are
// read again when they change (a renewed Secret, a rotated key): no
// restart is needed.
type Files struct {
	Cert, Key, CA string
}

// recheck is how often the files are looked at, at most.
const recheck = time.Second

type keyPair struct {
	cert *tls.Certificate
	pool *x509.CertPool
}

// reloader holds the files' current contents.
type reloader struct {
	files   Files
	mu      sync.Mutex
	current keyPair
	stamp   string
	checked time.Time
}

func newReloader(f Files) (*reloader, error) {
	if f.Cert == "" || f.Key == "" || f.CA == "" {
		return nil, errors.New("mutual TLS needs a certificate, its key and a CA file")
	}
	r := &reloader{files: f}
	if _, err := r.get(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *reloader) stampOf() string {
	s := ""
	for _, p := range []string{r.files.Cert, r.files.Key, r.files.CA} {
		if st, err := os.Stat(p); err == nil {
			s += fmt.Sprintf("%s:%d:%d;", p, st.Size(), st.ModTime().UnixNano())
		}
	}
	return s
}

// get returns the current pair, reloading it when a file changed. A file
// that cannot be read keeps the pair loaded before.
func (r *reloader) get() (keyPair, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.current.cert != nil && time.Since(r.checked) < recheck {
		return r.current, nil
	}
	r.checked = time.Now()
	stamp := r.stampOf()
	if r.current.cert != nil && stamp == r.stamp {
		return r.current, nil
	}
	cert, err := tls.LoadX509KeyPair(r.files.Cert, r.files.Key)
	if err != nil {
		return r.current, fmt.Errorf("load %s and %s: %w", r.files.Cert, r.files.Key, err)
	}
	ca, err := os.ReadFile(r.files.CA)
	if err != nil {
		return r.current, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return r.current, fmt.Errorf("%s holds no PEM certificate", r.files.CA)
	}
	r.current, r.stamp = keyPair{&cert, pool}, stamp
	return r.current, nil
}

// ServerTLS is the agent's TLS: TLS 1.3, and a client certificate signed
// by the CA, marked for client authentication and holding an identity
// that ids pins to a role, is required; any other is refused in the
// handshake.
func ServerTLS(f Files, ids Identities) (*tls.Config, error) {
	if len(ids.Controllers) == 0 {
		return nil, errors.New("the agent needs the identity of the controller's certificate (--allow-controller)")
	}
	r, err := newReloader(f)
	if err != nil {
		return nil, err
	}
	pinned := func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("no client certificate")
		}
		if leaf := cs.PeerCertificates[0]; ids.RoleOf(leaf) == NoRole {
			return fmt.Errorf("client certificate %s is not marked for client authentication or holds no identity pinned to a role on this agent", describe(leaf))
		}
		return nil
	}
	return &tls.Config{MinVersion: tls.VersionTLS13, GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
		kp, _ := r.get()
		return &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{*kp.cert},
			ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: kp.pool, VerifyConnection: pinned}, nil
	}}, nil
}

// ClientTLS is the controller's TLS towards an agent: its client
// certificate, and the agent's certificate verified against the CA for
// the endpoint's host, marked for server authentication and holding the
// agents' identity.
func ClientTLS(f Files, agentIdentity string) (*tls.Config, error) {
	if agentIdentity == "" {
		return nil, errors.New("the controller needs the identity of the agents' certificates (--quota-agent-identity)")
	}
	r, err := newReloader(f)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			kp, _ := r.get()
			return kp.cert, nil
		},
		// The CA may be rotated too: the chain is verified here, against
		// the CA as it is now, instead of a pool fixed at dial time.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			kp, _ := r.get()
			if len(cs.PeerCertificates) == 0 {
				return errors.New("the agent showed no certificate")
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			leaf := cs.PeerCertificates[0]
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: kp.pool, Intermediates: inter, DNSName: cs.ServerName,
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
				return err
			}
			return checkAgent(leaf, agentIdentity)
		},
	}, nil
}

// Limits of the agent's server: connections at once (more wait in the
// listen queue), concurrent calls on one connection, and the size of a
// request.
const (
	maxConns   = 64
	maxStreams = 64
	maxRequest = 1 << 20
	// maxOps bounds the calls that open files on the share at once
	// (quotas, making and removing volumes), admitted before they open
	// any; copies have workers of their own (Config.CopyWorkers).
	maxOps = 16
)

// Serve serves agent on l with mutual TLS until ctx ends, letting each
// caller call what the role ids pins to its certificate allows.
func Serve(ctx context.Context, l net.Listener, agent Service, cfg *tls.Config, ids Identities) error {
	l = limitListener(l, maxConns)
	// Controllers ping during long calls (copies) to notice a host gone.
	redact := func(s string) string { return s }
	if r, ok := agent.(interface{ Redact(string) string }); ok {
		redact = r.Redact
	}
	g := grpc.NewServer(grpc.Creds(credentials.NewTLS(cfg)), grpc.UnaryInterceptor(authorize(ids, make(chan struct{}, maxOps), redact)),
		grpc.MaxConcurrentStreams(maxStreams), grpc.MaxRecvMsgSize(maxRequest),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: keepaliveEvery / 2}),
		// and the agent pings a quiet controller: a copy whose caller's
		// host is gone is stopped.
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: keepaliveEvery, Timeout: keepaliveEvery / 2}),
		grpc.InitialWindowSize(flowWindow), grpc.InitialConnWindowSize(flowWindow))
	Register(g, agent)
	go func() {
		<-ctx.Done()
		stopped := make(chan struct{})
		go func() { g.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(10 * time.Second):
			g.Stop()
		}
		if c, ok := agent.(interface{ Close() }); ok {
			c.Close()
		}
	}()
	return g.Serve(l)
}

// flowWindow is the HTTP/2 flow-control window of the agent's
// connections, both ways. A fixed window turns off gRPC's estimate of the
// link's bandwidth-delay product, which sends a ping (and draws an
// answer) with the data of nearly every small call: two writes and two
// reads on each side of every call for a window the agent's messages
// (records, progress) never come near filling.
const flowWindow = 1 << 20

// keepaliveEvery is how often a controller pings an agent while a call is
// in flight: a copy whose agent's host is gone fails within 1.5 of it.
const keepaliveEvery = 20 * time.Second

// Dial returns a Client of the agent at endpoint (host:port).
func Dial(endpoint string, cfg *tls.Config) (*Client, func() error, error) {
	host, _, err := net.SplitHostPort(endpoint)
	if err != nil {
		return nil, nil, fmt.Errorf("quota agent endpoint %q: %w", endpoint, err)
	}
	c := cfg.Clone()
	c.ServerName = host
	conn, err := grpc.NewClient("passthrough:///"+endpoint, grpc.WithTransportCredentials(credentials.NewTLS(c)),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 5 * time.Second},
			MinConnectTimeout: 5 * time.Second}),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: keepaliveEvery, Timeout: keepaliveEvery / 2}),
		grpc.WithInitialWindowSize(flowWindow), grpc.WithInitialConnWindowSize(flowWindow))
	if err != nil {
		return nil, nil, err
	}
	return NewClient(conn), conn.Close, nil
}

// authorize refuses a call whose caller's role may not call its method,
// admits one that opens files on the share only when one of ops is free,
// and passes its error's message through redact (the server's own paths
// stay in its log).
func authorize(ids Identities, ops chan struct{}, redact func(string) string) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
		role, who := NoRole, "a caller without a certificate"
		if p, ok := peer.FromContext(ctx); ok {
			if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 {
				role, who = ids.RoleOf(ti.State.PeerCertificates[0]), describe(ti.State.PeerCertificates[0])
			}
		}
		if !role.MayCall(info.FullMethod) {
			err := fault.New(fault.PermissionDenied, "%s (role %s) may not call %s", who, role, info.FullMethod)
			klog.Warningf("refused: %v", err)
			return nil, grpcstatus.Of(err)
		}
		switch info.FullMethod[strings.LastIndexByte(info.FullMethod, '/')+1:] {
		case "Copy", "CopyProgress", "Probe":
		default:
			select {
			case ops <- struct{}{}:
				defer func() { <-ops }()
			case <-ctx.Done():
				return nil, grpcstatus.Of(fault.Wrap(fault.Unavailable, ctx.Err(), "waiting for the agent's other calls"))
			}
		}
		resp, err := next(ctx, req)
		if st, ok := status.FromError(err); ok && err != nil {
			err = status.Error(st.Code(), redact(st.Message()))
		}
		return resp, err
	}
}

// limitListener lets at most n connections of l be open at once: Accept
// waits for one to close before it takes another.
func limitListener(l net.Listener, n int) net.Listener {
	return &limited{Listener: l, slots: make(chan struct{}, n)}
}

type limited struct {
	net.Listener
	slots chan struct{}
}

func (l *limited) Accept() (net.Conn, error) {
	l.slots <- struct{}{}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &slotConn{Conn: c, free: func() { <-l.slots }}, nil
}

type slotConn struct {
	net.Conn
	once sync.Once
	free func()
}

func (c *slotConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.free)
	return err
}
