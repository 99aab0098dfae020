package nfsclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/nfsdir/nfsdir/pkg/nfsproto"
)

// maxRecord bounds a reply record, all its fragments together.
const maxRecord = 4 * nfsproto.MaxFragment

// conn is one TCP connection to the server, carrying any number of calls
// at once: one goroutine reads the replies and hands each to the call
// waiting for its xid. The first error closes it for every call.
type conn struct {
	nc   net.Conn
	cred nfsproto.Cred

	wmu sync.Mutex // one call written at a time

	mu      sync.Mutex
	xid     uint32
	waiting map[uint32]chan []byte
	err     error // why it closed
	done    chan struct{}
}

func dial(ctx context.Context, d Dialer, addr string, cred nfsproto.Cred) (*conn, error) {
	nc, err := d(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c := &conn{nc: nc, cred: cred, xid: uint32(time.Now().UnixNano()), waiting: map[uint32]chan []byte{}, done: make(chan struct{})}
	go c.read()
	return c, nil
}

// close closes the connection for the reason err; calls waiting fail.
func (c *conn) close(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	c.err = err
	close(c.done)
	c.nc.Close()
}

func (c *conn) closedErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *conn) read() {
	for {
		rec, err := readRecord(c.nc)
		if err != nil {
			c.close(fmt.Errorf("connection to the NFS server lost: %w", err))
			return
		}
		xid, err := nfsproto.ReplyXID(rec)
		if err != nil {
			c.close(err)
			return
		}
		c.mu.Lock()
		ch := c.waiting[xid]
		delete(c.waiting, xid)
		c.mu.Unlock()
		if ch != nil {
			ch <- rec // buffered: never blocks
		}
	}
}

func readRecord(r io.Reader) ([]byte, error) {
	var rec []byte
	for {
		var h [4]byte
		if _, err := io.ReadFull(r, h[:]); err != nil {
			return nil, err
		}
		n, last, err := nfsproto.Fragment(h)
		if err != nil {
			return nil, err
		}
		if len(rec)+n > maxRecord {
			return nil, fmt.Errorf("reply of more than %d bytes", maxRecord)
		}
		start := len(rec)
		rec = append(rec, make([]byte, n)...)
		if _, err := io.ReadFull(r, rec[start:]); err != nil {
			return nil, err
		}
		if last {
			return rec, nil
		}
	}
}

// errTimedOut is a call with no reply by its deadline: whether the server
// ran it is unknown.
var errTimedOut = errors.New("no reply from the NFS server in time")

// call sends the procedure proc with args and returns its results. When
// ctx ends first, the connection is closed (its other calls fail too):
// the call's slot would otherwise stay in an unknown state.
func (c *conn) call(ctx context.Context, proc uint32, args []byte) ([]byte, error) {
	ch := make(chan []byte, 1)
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return nil, fmt.Errorf("%w: %w", errNotSent, c.err)
	}
	c.xid++
	xid := c.xid
	c.waiting[xid] = ch
	c.mu.Unlock()
	rec := nfsproto.Call(xid, proc, c.cred, args)
	c.wmu.Lock()
	if dl, ok := ctx.Deadline(); ok {
		c.nc.SetWriteDeadline(dl)
	}
	_, err := c.nc.Write(rec)
	c.wmu.Unlock()
	if err != nil {
		c.close(fmt.Errorf("sending to the NFS server: %w", err))
		return nil, c.closedErr()
	}
	select {
	case rep := <-ch:
		return nfsproto.Reply(rep)
	case <-c.done:
		return nil, c.closedErr()
	case <-ctx.Done():
		c.close(errTimedOut)
		return nil, fmt.Errorf("%w: %w", errTimedOut, ctx.Err())
	}
}
