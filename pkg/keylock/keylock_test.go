package keylock

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestTryAcquire(t *testing.T) {
	var s Set
	if !s.TryAcquire("a") || s.TryAcquire("a") || !s.TryAcquire("b") {
		t.Fatal("TryAcquire semantics")
	}
	s.Release("a")
	s.Release("never")
	if !s.TryAcquire("a") {
		t.Fatal("released key not free")
	}
}

func TestConcurrentExclusive(t *testing.T) {
	var s Set
	var inside, maxInside atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < 64; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 200; j++ {
				if !s.TryAcquire("k") {
					continue
				}
				n := inside.Add(1)
				if n > maxInside.Load() {
					maxInside.Store(n)
				}
				inside.Add(-1)
				s.Release("k")
			}
		}()
	}
	wg.Wait()
	if maxInside.Load() != 1 {
		t.Fatalf("%d holders at once", maxInside.Load())
	}
}

func TestAcquireWaitsForRelease(t *testing.T) {
	var s Set
	s.TryAcquire("k")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if s.Acquire(ctx, "k") {
		t.Fatal("Acquire took a held key")
	}
	got := make(chan bool)
	go func() { got <- s.Acquire(context.Background(), "k") }()
	select {
	case <-got:
		t.Fatal("Acquire returned while the key was held")
	case <-time.After(20 * time.Millisecond):
	}
	s.Release("k")
	if !<-got {
		t.Fatal("Acquire did not take the released key")
	}
	if s.TryAcquire("k") {
		t.Fatal("the key Acquire took is free")
	}
	// Many waiters: each gets the key in turn, one at a time.
	var wg sync.WaitGroup
	var inside atomic.Int32
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !s.Acquire(context.Background(), "k") {
				t.Error("Acquire without a deadline gave up")
				return
			}
			if inside.Add(1) != 1 {
				t.Error("two holders at once")
			}
			inside.Add(-1)
			s.Release("k")
		}()
	}
	s.Release("k")
	wg.Wait()
}
