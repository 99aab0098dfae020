package lab

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy forwards TCP connections from a port of its own to the lab's NFS
// server (or to another address, NewProxyTo). A share mounted through it (mount option port=Proxy.Port) hangs
// like a dead server while Paused, and shares mounted directly keep
// working: one hung share among healthy ones. With a delay, it holds every
// byte that long in each direction, as a server further away on the
// network would (a round trip then takes twice the delay more).
type Proxy struct {
	Port   int
	dial   func() (net.Conn, error)
	delay  time.Duration
	paused atomic.Bool
	l      net.Listener
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []net.Conn
}

// StartProxy starts a proxy to the server's NFS port (2049); it stops
// when the test ends. Its connections to the server come from reserved
// ports, as the kernel client's do.
func StartProxy(t testing.TB) *Proxy {
	t.Helper()
	p, err := NewProxy(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// NewProxy starts a proxy to the server's NFS port that holds every byte
// for delay in each direction; Close stops it.
func NewProxy(delay time.Duration) (*Proxy, error) {
	return newProxy(func() (net.Conn, error) { return dialReserved(net.JoinHostPort(Server(), "2049")) }, delay)
}

// NewProxyTo starts a proxy to the TCP address addr (an agent's, say)
// that holds every byte for delay in each direction; Close stops it.
func NewProxyTo(addr string, delay time.Duration) (*Proxy, error) {
	return newProxy(func() (net.Conn, error) { return net.DialTimeout("tcp", addr, 5*time.Second) }, delay)
}

func newProxy(dial func() (net.Conn, error), delay time.Duration) (*Proxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{Port: l.Addr().(*net.TCPAddr).Port, dial: dial, delay: delay, l: l}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

// Pause stops passing bytes in both directions; connections stay open.
func (p *Proxy) Pause() { p.paused.Store(true) }

// Resume passes bytes again, those held meanwhile first.
func (p *Proxy) Resume() { p.paused.Store(false) }

func (p *Proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		s, err := p.dial()
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		p.wg.Add(2)
		if p.delay > 0 {
			go p.delayed(c, s)
			go p.delayed(s, c)
		} else {
			go p.pipe(c, s)
			go p.pipe(s, c)
		}
	}
}

// pipe copies from src to dst, holding what it read while paused.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	defer dst.Close()
	buf := make([]byte, 256<<10)
	for {
		n, err := src.Read(buf)
		for p.paused.Load() {
			time.Sleep(20 * time.Millisecond)
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// delayed copies from src to dst, each chunk written p.delay after it was
// read, in order; reading goes on meanwhile, so calls stay pipelined.
func (p *Proxy) delayed(dst, src net.Conn) {
	defer p.wg.Done()
	type chunk struct {
		due time.Time
		b   []byte
	}
	q := make(chan chunk, 4096)
	go func() {
		defer close(q)
		buf := make([]byte, 256<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				q <- chunk{time.Now().Add(p.delay), append([]byte(nil), buf[:n]...)}
			}
			if err != nil {
				return
			}
		}
	}()
	defer dst.Close()
	for c := range q {
		time.Sleep(time.Until(c.due))
		for p.paused.Load() {
			time.Sleep(20 * time.Millisecond)
		}
		if _, err := dst.Write(c.b); err != nil {
			src.Close() // ends the reader
			for range q {
			}
			return
		}
	}
}

// Close stops the proxy and closes its connections.
func (p *Proxy) Close() {
	p.Resume()
	p.l.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// dialReserved connects from a port below 1024, which knfsd expects of
// clients unless the export says "insecure".
func dialReserved(addr string) (net.Conn, error) {
	var err error
	for port := 1023; port > 600; port-- {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: port}, Timeout: 5 * time.Second}
		var c net.Conn
		if c, err = d.Dial("tcp", addr); err == nil {
			return c, nil
		}
	}
	return nil, err
}
