// Package nfsclient sends NFSv4.1 COMPOUNDs of its own to an NFS server,
// over one TCP connection and one session, so that several steps on the
// share cost one round trip instead of one each as through the kernel's
// client. It acts only on filehandles its caller gives it (taken from the
// kernel's mount of the same export, name_to_handle_at) and names below
// them; LOOKUP never follows a symlink.
//
// Bounds: every call ends by its context's deadline, or Timeout when it
// has none; a call that times out closes the connection and the session
// (its other calls fail too, whether the server ran them is unknown, as
// with a soft mount), and the next call makes a new one. Replies are held
// to 4 MiB, slots to what the server grants and at most Slots. Close ends
// the reader goroutine and the session on the server.
package nfsclient

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/nfsdir/nfsdir/pkg/mounttable"
	"github.com/nfsdir/nfsdir/pkg/nfsproto"
)

// Dialer opens a connection (net.Dialer's DialContext).
type Dialer func(ctx context.Context, network, addr string) (net.Conn, error)

// Config says which server to talk to, and how.
type Config struct {
	Addr    string        // host:port of the server's NFS service
	Cred    nfsproto.Cred // AUTH_SYS credential of every call
	Slots   int           // at most this many calls at once (default 16)
	Timeout time.Duration // of a call whose context has no deadline (default 30 s)
	Dial    Dialer        // default: from a reserved port where the process may bind one
}

// Client is a session with one server. It is safe for concurrent use.
type Client struct {
	cfg   Config
	owner []byte
	verf  [8]byte

	est    chan struct{} // held while a session is made
	mu     sync.Mutex
	sess   *session
	closed bool

	smu   sync.Mutex
	stats stats
}

// stats are the counts of a Client's COMPOUNDs, as the kernel keeps them
// for a mount's operations.
type stats struct {
	calls, errors, timeouts, sent, received uint64
	rtt, execute                            time.Duration
}

// Stats returns what the client's COMPOUNDs (those of its sessions'
// making included) have cost so far, in the form of the kernel's counts of
// a mount's operations (/proc/self/mountstats): every COMPOUND is one
// operation, sent once.
func (c *Client) Stats() mounttable.OpStats {
	c.smu.Lock()
	defer c.smu.Unlock()
	s := c.stats
	return mounttable.OpStats{Ops: s.calls, Transmissions: s.calls, MajorTimeouts: s.timeouts, BytesSent: s.sent,
		BytesReceived: s.received, RTTMillis: uint64(s.rtt.Milliseconds()), ExecuteMillis: uint64(s.execute.Milliseconds()), Errors: s.errors}
}

// count adds one COMPOUND to the stats: args and res its bytes, rtt
// from its sending to its reply, execute from its asking for a slot.
func (c *Client) count(args, res []byte, rtt, execute time.Duration, err error) {
	c.smu.Lock()
	defer c.smu.Unlock()
	c.stats.calls++
	c.stats.sent += uint64(len(args))
	c.stats.received += uint64(len(res))
	c.stats.rtt += rtt
	c.stats.execute += execute
	var oe *nfsproto.OpError
	switch {
	case errors.Is(err, errTimedOut):
		c.stats.timeouts++
	case errors.As(err, &oe):
		c.stats.errors++
	}
}

type session struct {
	conn     *conn
	id       [16]byte
	clientID uint64
	slots    chan *slot
	maxSlot  uint32
}

type slot struct{ id, seq uint32 }

// ProcessCred is the AUTH_SYS credential of this process, as the kernel's
// client would send it for its calls.
func ProcessCred() nfsproto.Cred {
	host, _ := os.Hostname()
	groups, _ := os.Getgroups()
	c := nfsproto.Cred{Machine: host, UID: uint32(os.Geteuid()), GID: uint32(os.Getegid())}
	for _, g := range groups {
		c.Groups = append(c.Groups, uint32(g))
	}
	return c
}

// New returns a client of cfg; it connects at its first call.
func New(cfg Config) *Client {
	if cfg.Slots <= 0 {
		cfg.Slots = 16
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.Dial == nil {
		cfg.Dial = dialReserved
	}
	c := &Client{cfg: cfg, est: make(chan struct{}, 1)}
	rand.Read(c.verf[:])
	host, _ := os.Hostname()
	c.owner = fmt.Appendf(nil, "nfsdir %s %d %x", host, os.Getpid(), c.verf)
	return c
}

// errNotSent is a call that found its session's connection closed
// before it was sent (the server closed an idle connection, or restarted):
// nfsproto.ErrNotSent.
var errNotSent = nfsproto.ErrNotSent

// ErrClosed is a call after Close.
var ErrClosed = errors.New("nfsclient: closed")

// Do runs ops as one COMPOUND, after the session's SEQUENCE, and fills in
// their results. It returns an *nfsproto.OpError when an operation failed
// (those before it ran, none after it), an error wrapping
// nfsproto.ErrNotSent when none ran (no session could be made: the server
// is down, or refuses the client, nfsproto.ErrRPC), and any other error
// when the reply was lost: whether the server ran them is unknown. A session the server lost is made
// again and the COMPOUND sent once more: the server ran none of it.
func (c *Client) Do(ctx context.Context, ops ...nfsproto.Op) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.cfg.Timeout)
		defer cancel()
	}
	for try := 0; ; try++ {
		s, err := c.session(ctx)
		if err != nil {
			return fmt.Errorf("%w: %w", nfsproto.ErrNotSent, err)
		}
		err = c.do(ctx, s, ops)
		var oe *nfsproto.OpError
		lost := errors.As(err, &oe) && oe.Index == 0 && oe.Status.SessionLost()
		if lost || errors.Is(err, errNotSent) {
			c.drop(s, err)
			if try == 0 {
				continue
			}
		}
		if oe != nil && oe.Index > 0 {
			oe.Index-- // its place among ops
		}
		return err
	}
}

func (c *Client) do(ctx context.Context, s *session, ops []nfsproto.Op) (err error) {
	queued := time.Now()
	var sl *slot
	select {
	case sl = <-s.slots:
	case <-s.conn.done:
		return fmt.Errorf("%w: %w", errNotSent, s.conn.closedErr())
	case <-ctx.Done():
		return fmt.Errorf("waiting for a free NFS session slot: %w", ctx.Err())
	}
	seq := &nfsproto.Sequence{Session: s.id, SeqID: sl.seq, Slot: sl.id, MaxSlot: s.maxSlot}
	all := append([]nfsproto.Op{seq}, ops...)
	args := nfsproto.EncodeCompound("nfsdir", all)
	sent := time.Now()
	res, err := s.conn.call(ctx, nfsproto.ProcCompound, args)
	if !errors.Is(err, errNotSent) {
		defer func() { c.count(args, res, time.Since(sent), time.Since(queued), err) }()
	}
	if err != nil {
		c.drop(s, err) // the slot's state is unknown
		return err
	}
	err = nfsproto.DecodeCompound(res, all)
	var oe *nfsproto.OpError
	if !errors.As(err, &oe) || oe.Index > 0 {
		if err != nil && oe == nil {
			c.drop(s, err) // a reply we cannot read: the slot's state is unknown
			return err
		}
		sl.seq++ // SEQUENCE ran: the slot moved on
	}
	s.slots <- sl
	return err
}

// session returns the current session, making one when there is none.
func (c *Client) session(ctx context.Context) (*session, error) {
	select {
	case c.est <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for the NFS session: %w", ctx.Err())
	}
	defer func() { <-c.est }()
	c.mu.Lock()
	s, closed := c.sess, c.closed
	c.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	if s != nil {
		return s, nil
	}
	s, err := c.establish(ctx)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		s.conn.close(ErrClosed)
		return nil, ErrClosed
	}
	c.sess = s
	return s, nil
}

// establish connects and makes a client ID and a session (RFC 8881,
// 18.35, 18.36, 18.51).
func (c *Client) establish(ctx context.Context) (*session, error) {
	cn, err := dial(ctx, c.cfg.Dial, c.cfg.Addr, c.cfg.Cred)
	if err != nil {
		return nil, fmt.Errorf("connecting to the NFS server %s: %w", c.cfg.Addr, err)
	}
	fail := func(step string, err error) (*session, error) {
		cn.close(err)
		return nil, fmt.Errorf("NFSv4.1 %s with %s: %w", step, c.cfg.Addr, err)
	}
	ex := &nfsproto.ExchangeID{Verifier: c.verf, Owner: c.owner}
	if err := c.plain(ctx, cn, ex); err != nil {
		return fail("EXCHANGE_ID", err)
	}
	cs := &nfsproto.CreateSession{ClientID: ex.ClientID, SeqID: ex.SeqID, Fore: nfsproto.ChannelAttrs{
		MaxRequestSize: 64 << 10, MaxResponseSize: 64 << 10, MaxResponseCached: 4 << 10,
		MaxOps: 64, MaxRequests: uint32(c.cfg.Slots)}}
	if err := c.plain(ctx, cn, cs); err != nil {
		return fail("CREATE_SESSION", err)
	}
	n := min(cs.ForeGranted.MaxRequests, uint32(c.cfg.Slots))
	if n == 0 {
		n = 1
	}
	s := &session{conn: cn, id: cs.Session, clientID: ex.ClientID, slots: make(chan *slot, n), maxSlot: n - 1}
	for i := range n {
		s.slots <- &slot{id: i, seq: 1}
	}
	err = c.do(ctx, s, []nfsproto.Op{&nfsproto.ReclaimComplete{}})
	var oe *nfsproto.OpError
	if err != nil && !(errors.As(err, &oe) && oe.Index == 1 && oe.Status == errCompleteAlready) {
		return fail("RECLAIM_COMPLETE", err)
	}
	return s, nil
}

// errCompleteAlready: RECLAIM_COMPLETE was already sent for the client ID.
const errCompleteAlready nfsproto.Status = 10054

// plain sends op alone, outside any session.
func (c *Client) plain(ctx context.Context, cn *conn, op nfsproto.Op) error {
	res, err := cn.call(ctx, nfsproto.ProcCompound, nfsproto.EncodeCompound("nfsdir", []nfsproto.Op{op}))
	if err != nil {
		return err
	}
	return nfsproto.DecodeCompound(res, []nfsproto.Op{op})
}

// drop forgets s (when still current) and closes its connection.
func (c *Client) drop(s *session, why error) {
	c.mu.Lock()
	if c.sess == s {
		c.sess = nil
	}
	c.mu.Unlock()
	s.conn.close(why)
}

// Close ends the session and the client ID on the server (within 2 s) and
// the connection.
func (c *Client) Close() error {
	c.mu.Lock()
	s := c.sess
	c.sess, c.closed = nil, true
	c.mu.Unlock()
	if s == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := c.plain(ctx, s.conn, &nfsproto.DestroySession{Session: s.id})
	if err == nil {
		err = c.plain(ctx, s.conn, &nfsproto.DestroyClientID{ClientID: s.clientID})
	}
	s.conn.close(ErrClosed)
	return err
}
