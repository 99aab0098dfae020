package serveragent

import (
	"context"
	"crypto/tls"
	"fmt"
	"sync"
	"time"

	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/grpcstatus"
	"github.com/nfsdir/nfsdir/pkg/provision"
	"github.com/nfsdir/nfsdir/pkg/treecopy"
)

// CallTimeout bounds one call to an agent.
const CallTimeout = 30 * time.Second

// Pool is the controller's side: one client per agent endpoint, all with
// the controller's client certificate.
type Pool struct {
	tls     *tls.Config
	mu      sync.Mutex
	clients map[string]*Client
	closers []func() error
	observe func(agent, method string, err error, d time.Duration) // nil: none
}

// Observe has f told of every call the Pool makes once it ends: the
// agent's endpoint, the method ("MakeVolume"), the error (nil when it
// succeeded) and how long it took, connecting included. Call it before
// the Pool is used.
func (p *Pool) Observe(f func(agent, method string, err error, d time.Duration)) { p.observe = f }

// timed tells the observer of a call to the agent at endpoint that began
// at t0 and ended with err, and returns err.
func (p *Pool) timed(endpoint, method string, t0 time.Time, err error) error {
	if p.observe != nil {
		p.observe(endpoint, method, err, time.Since(t0))
	}
	return err
}

// NewPool returns a Pool that authenticates with files and accepts agents
// whose certificates hold agentIdentity.
func NewPool(files Files, agentIdentity string) (*Pool, error) {
	cfg, err := ClientTLS(files, agentIdentity)
	if err != nil {
		return nil, err
	}
	return &Pool{tls: cfg, clients: map[string]*Client{}}, nil
}

func (p *Pool) client(endpoint string) (*Client, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.clients[endpoint]; ok {
		return c, nil
	}
	c, closer, err := Dial(endpoint, p.tls)
	if err != nil {
		return nil, fault.Wrap(fault.InvalidArgument, err, "quota agent %s", endpoint)
	}
	p.clients[endpoint] = c
	p.closers = append(p.closers, closer)
	return c, nil
}

// call runs fn with the client of the agent at endpoint, bounded by
// CallTimeout.
func (p *Pool) call(ctx context.Context, endpoint, method string, fn func(context.Context, *Client) error) error {
	t0 := time.Now()
	c, err := p.client(endpoint)
	if err != nil {
		return p.timed(endpoint, method, t0, err)
	}
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	return p.timed(endpoint, method, t0, fn(ctx, c))
}

// wrap names the agent in its error and keeps the error's kind; an agent
// that cannot be reached is Unavailable.
func wrap(endpoint, what string, err error) error {
	if err == nil {
		return nil
	}
	return fault.Wrap(grpcstatus.Kind(err), err, "quota agent %s: %s", endpoint, what)
}

// Set sets the limits of volume v through the agent at endpoint.
func (p *Pool) Set(ctx context.Context, endpoint string, v Volume, bytes, inodes uint64) (u *Usage, err error) {
	err = p.call(ctx, endpoint, "Set", func(ctx context.Context, c *Client) error {
		u, err = c.Set(ctx, &SetRequest{Volume: v, Bytes: bytes, Inodes: inodes})
		return wrap(endpoint, "set the quota of "+v.SubDir, err)
	})
	return u, err
}

// Clear clears the limits of volume v through the agent at endpoint.
func (p *Pool) Clear(ctx context.Context, endpoint string, v Volume) error {
	return p.call(ctx, endpoint, "Clear", func(ctx context.Context, c *Client) error {
		return wrap(endpoint, "clear the quota of "+v.SubDir, c.Clear(ctx, &v))
	})
}

// Get returns what volume v's project uses, and its limits, through the
// agent at endpoint.
func (p *Pool) Get(ctx context.Context, endpoint string, v Volume) (u *Usage, err error) {
	err = p.call(ctx, endpoint, "Get", func(ctx context.Context, c *Client) error {
		u, err = c.Get(ctx, &v)
		return wrap(endpoint, "read the usage of "+v.SubDir, err)
	})
	return u, err
}

// CopyTree has the agent at endpoint copy a tree on the server: the call
// lasts as long as the copy, bounded by ctx (and by the connection's
// keepalive when the agent's host goes away).
func (p *Pool) CopyTree(ctx context.Context, endpoint string, req provision.RemoteCopy) (treecopy.Result, error) {
	t0 := time.Now()
	c, err := p.client(endpoint)
	if err != nil {
		return treecopy.Result{}, p.timed(endpoint, "Copy", t0, err)
	}
	res, err := c.Copy(ctx, &req)
	if res == nil {
		res = &treecopy.Result{}
	}
	return *res, p.timed(endpoint, "Copy", t0, wrap(endpoint, fmt.Sprintf("copy %s into %s", req.Src, req.Dst), err))
}

// CopyProgress tells how far the agent at endpoint has come with the copy
// req.
func (p *Pool) CopyProgress(ctx context.Context, endpoint string, req provision.RemoteCopy) (entries, bytes int64, err error) {
	err = p.call(ctx, endpoint, "CopyProgress", func(ctx context.Context, c *Client) error {
		got, err := c.CopyProgress(ctx, &req)
		if err != nil {
			return wrap(endpoint, "progress of a copy into "+req.Dst.String(), err)
		}
		entries, bytes = got.Entries, got.Bytes
		return nil
	})
	return entries, bytes, err
}

// MakeVolume has the agent at endpoint make a volume on the server.
func (p *Pool) MakeVolume(ctx context.Context, endpoint string, m provision.RemoteMake) (rec *provision.Record, err error) {
	err = p.call(ctx, endpoint, "MakeVolume", func(ctx context.Context, c *Client) error {
		rec, err = c.MakeVolume(ctx, &m)
		return wrap(endpoint, fmt.Sprintf("make volume %q in %q", m.Request.Name, m.Request.SubDir), err)
	})
	if err != nil {
		return nil, err
	}
	return rec, nil
}

// RemoveVolume has the agent at endpoint delete a volume on the server.
func (p *Pool) RemoveVolume(ctx context.Context, endpoint string, r provision.RemoteRemove) (provision.RemoteRemoved, error) {
	var res provision.RemoteRemoved
	err := p.call(ctx, endpoint, "RemoveVolume", func(ctx context.Context, c *Client) (err error) {
		res, err = c.RemoveVolume(ctx, &r)
		return wrap(endpoint, "delete volume "+r.Key+"."+r.Token, err)
	})
	return res, err
}

// Close closes every connection.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.closers {
		c()
	}
	p.clients, p.closers = map[string]*Client{}, nil
}
