// Package keylock serialises operations per key (a volume name, a volume ID,
// a target path): TryAcquire never blocks (a caller that finds its key busy
// answers the RPC with Aborted, as the CSI spec asks); Acquire waits for the
// key, as long as its context allows.
package keylock

import (
	"context"
	"sync"
)

// Set is a set of held keys. The zero value is ready to use.
type Set struct {
	mu   sync.Mutex
	held map[string]chan struct{} // closed when the key is released
}

// TryAcquire takes key and returns true, or returns false when the key is
// already held.
func (s *Set) TryAcquire(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.takeLocked(key)
	return ok
}

// Acquire takes key, waiting while another holds it, and returns true; or
// returns false, without the key, once ctx ends.
func (s *Set) Acquire(ctx context.Context, key string) bool {
	for {
		s.mu.Lock()
		released, ok := s.takeLocked(key)
		s.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-released:
		case <-ctx.Done():
			return false
		}
	}
}

// takeLocked takes key if it is free; if not, it returns the channel its
// release closes. s.mu is held.
func (s *Set) takeLocked(key string) (released chan struct{}, ok bool) {
	if s.held == nil {
		s.held = map[string]chan struct{}{}
	}
	if ch, busy := s.held[key]; busy {
		return ch, false
	}
	s.held[key] = make(chan struct{})
	return nil, true
}

// Release frees key; releasing a key not held does nothing.
func (s *Set) Release(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ch, ok := s.held[key]; ok {
		close(ch)
		delete(s.held, key)
	}
}
