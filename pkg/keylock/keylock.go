// Package keylock serialises operations per key (a volume name, a volume ID,
// a target path) without blocking: a caller that finds its key busy gets
// false and answers the RPC with Aborted, as the CSI spec asks.
package keylock

import "sync"

// Set is a set of held keys. The zero value is ready to use.
type Set struct {
	mu   sync.Mutex
	held map[string]struct{}
}

// TryAcquire takes key and returns true, or returns false when the key is
// already held.
func (s *Set) TryAcquire(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held == nil {
		s.held = map[string]struct{}{}
	}
	if _, busy := s.held[key]; busy {
		return false
	}
	s.held[key] = struct{}{}
	return true
}

// Release frees key. Releasing a key that is not held does nothing.
func (s *Set) Release(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.held, key)
}
