package keylock

import (
	"sync"
	"sync/atomic"
	"testing"
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
