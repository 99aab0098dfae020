package nfsclient

import (
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/nfsdir/nfsdir/pkg/nfsproto"
)

// silentServer accepts connections, reads whatever is sent and never
// answers, as a server that hangs would.
func silentServer(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(io.Discard, c); c.Close() }()
		}
	}()
	return l.Addr().String()
}

func TestACallToAServerThatNeverAnswersEndsByItsDeadline(t *testing.T) {
	before := runtime.NumGoroutine()
	c := New(Config{Addr: silentServer(t), Timeout: 200 * time.Millisecond})
	start := time.Now()
	err := c.Do(context.Background(), &nfsproto.PutRootFH{}, &nfsproto.GetFH{})
	if !errors.Is(err, errTimedOut) {
		t.Errorf("Do: %v, want a time-out", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Do returned after %v, with a 200 ms time-out", d)
	}
	// Each call makes its attempt, bounded, and none is left behind.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := c.Do(ctx, &nfsproto.PutRootFH{}); err == nil {
		t.Error("a second call succeeded")
	}
	c.Close()
	if err := c.Do(context.Background(), &nfsproto.PutRootFH{}); !errors.Is(err, ErrClosed) {
		t.Errorf("a call after Close: %v", err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before+1 && time.Now().Before(deadline) { // +1: the server's
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before+1 {
		t.Errorf("%d goroutines after Close, %d before", n, before)
	}
}

func TestACallWaitingForTheSessionKeepsItsDeadline(t *testing.T) {
	c := New(Config{Addr: silentServer(t), Timeout: 5 * time.Second})
	defer c.Close()
	go c.Do(context.Background(), &nfsproto.PutRootFH{}) // holds the session's making for 5 s
	time.Sleep(50 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := c.Do(ctx, &nfsproto.PutRootFH{}); err == nil {
		t.Error("succeeded")
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("a call with 100 ms left waited %v for another's session", d)
	}
}
