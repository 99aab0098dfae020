package csiserver

import (
	"context"

	"github.com/nfsdir/nfsdir/pkg/fault"
)

// bounded runs fn holding the lock of key until fn returns, but returns
// when ctx ends even if fn does not: filesystem calls on a dead hard-mounted
// server block in the kernel and cannot be cancelled. fn then finishes in
// the background with the lock still held, so retries get Aborted instead
// of piling up blocked goroutines, and the first retry after the server
// returns gets the result (every operation is idempotent).
func (s *Controller) bounded(ctx context.Context, key string, fn func() error) error {
	if !s.locks.TryAcquire(key) {
		return busy("volume " + key)
	}
	done := make(chan error, 1)
	go func() {
		err := fn()
		s.locks.Release(key) // before answering: an immediate retry must find it free
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fault.Wrap(fault.DeadlineExceeded, ctx.Err(), "the NFS server did not answer in time; the operation goes on in the background and a retry returns its result")
	}
}
