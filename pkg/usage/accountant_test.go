package usage

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nfsdir/nfsdir/pkg/capacity"
)

// fakeBook is a share as the accountant sees it: records, their trees'
// sizes, the stored figures, and removals taken aside with when.
type fakeBook struct {
	mu       sync.Mutex
	vols     map[string]Volume
	bytes    map[string]int64 // what a walk of each volume finds
	figures  map[string]capacity.Figure
	aside    map[string]time.Time // removals taken aside, by name
	walked   map[string]int       // walks, by key
	failList bool
}

func newFakeBook() *fakeBook {
	return &fakeBook{vols: map[string]Volume{}, bytes: map[string]int64{}, figures: map[string]capacity.Figure{},
		aside: map[string]time.Time{}, walked: map[string]int{}}
}

func (b *fakeBook) add(v Volume, bytes int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.vols[v.Key], b.bytes[v.Key] = v, bytes
}

func (b *fakeBook) remove(key string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.vols, key)
}

func (b *fakeBook) Names() (keys, removals []string, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failList {
		return nil, nil, errors.New("share gone")
	}
	for k := range b.vols {
		keys = append(keys, k)
	}
	for n := range b.aside {
		removals = append(removals, n)
	}
	slices.Sort(keys)
	return keys, removals, nil
}

func (b *fakeBook) SettleRemovals(removals []string, grace time.Duration) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, r := range removals {
		if at, ok := b.aside[r]; ok && time.Since(at) >= grace {
			delete(b.aside, r)
			n++
		}
	}
	return n
}

func (b *fakeBook) DropFigures(keys []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for k := range b.figures {
		if _, found := slices.BinarySearch(keys, k); !found {
			delete(b.figures, k)
		}
	}
}

func (b *fakeBook) Volume(key string) (Volume, bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	v, ok := b.vols[key]
	return v, ok, nil
}

func (b *fakeBook) Figure(v Volume) (capacity.Figure, bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	fig, ok := b.figures[v.Key]
	return fig, ok && fig.Token == v.Token, nil
}

func (b *fakeBook) Count(_ context.Context, v Volume, _ Walker) (capacity.Figure, bool, error) {
	b.mu.Lock()
	b.walked[v.Key]++
	res := Result{Bytes: b.bytes[v.Key], Inodes: 1}
	b.mu.Unlock()
	fig, err := b.Store(v, res)
	return fig, err == nil, err
}

func (b *fakeBook) Store(v Volume, res Result) (capacity.Figure, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	fig := capacity.Figure{Token: v.Token, Bytes: res.Bytes, Inodes: res.Inodes, Counted: time.Now()}
	b.figures[v.Key] = fig
	return fig, nil
}

func (b *fakeBook) walks(key string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.walked[key]
}

// onePass runs one pass of ac over book, as Run starts it.
func onePass(t *testing.T, ac *Accountant, book Book) {
	t.Helper()
	sh := Shelf{Share: "/export", Name: "nfs.example:/export", Book: book}
	l := ac.startPass(sh.Name)
	if l == nil {
		t.Fatal("no pass was due")
	}
	ac.pass(context.Background(), sh, l)
	ac.mu.Lock()
	l.lastPass = time.Time{} // the next pass is due at once
	ac.mu.Unlock()
}

// TestAPassCountsWhatIsDueAndTakesUpStoredFigures: a volume whose stored
// figure is recent (counted by an earlier or another controller) is not
// counted again before Every; one never counted, or counted long ago, is;
// a pass counts a volume once per Every however often it runs.
func TestAPassCountsWhatIsDueAndTakesUpStoredFigures(t *testing.T) {
	b := newFakeBook()
	b.add(Volume{Key: "fresh", Token: "t1", Own: true}, 10)
	b.add(Volume{Key: "stale", Token: "t2", Own: true}, 20)
	b.add(Volume{Key: "new", Token: "t3", Own: true}, 30)
	b.figures["fresh"] = capacity.Figure{Token: "t1", Counted: time.Now()}
	b.figures["stale"] = capacity.Figure{Token: "t2", Counted: time.Now().Add(-2 * time.Hour)}
	ac := NewAccountant(Accounting{Every: time.Hour, Workers: 2})
	onePass(t, ac, b)
	onePass(t, ac, b)
	for key, want := range map[string]int{"fresh": 0, "stale": 1, "new": 1} {
		if got := b.walks(key); got != want {
			t.Errorf("%s walked %d times in two passes; want %d", key, got, want)
		}
	}
	if st := ac.Stats(); st.Counts != 2 || st.Entries != 2 || st.Failures != 0 {
		t.Errorf("stats: %+v", st)
	}
}

// TestAPassSettlesRemovalsOnceOldEnough: the pass, the one background
// listing of the records, settles what removals left aside, and only
// once they are older than a removal in progress could be.
func TestAPassSettlesRemovalsOnceOldEnough(t *testing.T) {
	b := newFakeBook()
	b.aside["k.del.t"] = time.Now()
	ac := NewAccountant(Accounting{Every: time.Hour})
	onePass(t, ac, b)
	if len(b.aside) != 1 {
		t.Fatal("a removal taken aside just now was settled")
	}
	b.aside["k.del.t"] = time.Now().Add(-2 * ac.settleAfter)
	onePass(t, ac, b)
	if len(b.aside) != 0 {
		t.Fatal("a removal left aside long ago was not settled")
	}
}

// TestOverCapacityFollowsTheLastCount: a volume whose count exceeds its
// capacity is counted over, by the excess; one without capacity never
// is; a volume whose record is gone leaves the figures and its figure is
// dropped.
func TestOverCapacityFollowsTheLastCount(t *testing.T) {
	b := newFakeBook()
	b.add(Volume{Key: "over", Token: "t", Own: true, Capacity: 100}, 150)
	b.add(Volume{Key: "within", Token: "t", Own: true, Capacity: 100}, 50)
	b.add(Volume{Key: "unbounded", Token: "t", Own: true}, 1<<40)
	ac := NewAccountant(Accounting{Every: time.Millisecond})
	onePass(t, ac, b)
	const share = "nfs.example:/export"
	if st := ac.Stats(); st.OverVolumes[share] != 1 || st.OverBytes[share] != 50 {
		t.Fatalf("over capacity: %+v", st)
	}
	b.remove("over")
	time.Sleep(2 * time.Millisecond)
	onePass(t, ac, b)
	if st := ac.Stats(); st.OverVolumes[share] != 0 || st.OverBytes[share] != 0 {
		t.Fatalf("a removed volume is still over capacity: %+v", st)
	}
	if _, ok := b.figures["over"]; ok {
		t.Fatal("the figure of a removed volume stayed")
	}
}

// serverAnswers answers for the server's accounting, or fails.
type serverAnswers struct {
	mu    sync.Mutex
	asked []string
	fail  bool
}

func (s *serverAnswers) Usage(_ context.Context, endpoint, share, subDir, token string) (Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asked = append(s.asked, endpoint+" "+share+" "+subDir+" "+token)
	if s.fail {
		return Result{}, errors.New("agent down")
	}
	return Result{Bytes: 7, Inodes: 1}, nil
}

// TestTheServerAnswersOnlyForItsOwnVolumes: a volume with an agent and a
// directory of its own is asked of the agent and not walked; a shared
// one, even with an agent, is walked; while the agent fails, the walk
// counts it.
func TestTheServerAnswersOnlyForItsOwnVolumes(t *testing.T) {
	b := newFakeBook()
	b.add(Volume{Key: "q", SubDir: "pvc-q", Token: "tq", Agent: "agent:1", Own: true}, 100)
	b.add(Volume{Key: "s", SubDir: "pvc-s", Token: "ts", Agent: "agent:1"}, 100)
	srv := &serverAnswers{}
	ac := NewAccountant(Accounting{Every: time.Millisecond, Server: srv})
	onePass(t, ac, b)
	if !slices.Equal(srv.asked, []string{"agent:1 /export pvc-q tq"}) || b.walks("q") != 0 || b.walks("s") != 1 {
		t.Fatalf("asked %q; walked q %d, s %d", srv.asked, b.walks("q"), b.walks("s"))
	}
	if b.figures["q"].Bytes != 7 || ac.Stats().FromServer != 1 {
		t.Fatalf("figure %+v, stats %+v", b.figures["q"], ac.Stats())
	}
	srv.fail = true
	time.Sleep(2 * time.Millisecond)
	onePass(t, ac, b)
	if b.walks("q") != 1 || b.figures["q"].Bytes != 100 {
		t.Fatalf("with the agent down: walked %d, figure %+v", b.walks("q"), b.figures["q"])
	}
}

// TestRunStopsWithItsContext: Run passes over every shelf it is given,
// a listing that fails is a failed pass and not a crash, and Run returns
// once its context ends, with no pass left running.
func TestRunStopsWithItsContext(t *testing.T) {
	good, bad := newFakeBook(), newFakeBook()
	good.add(Volume{Key: "v", Token: "t", Own: true}, 1)
	bad.failList = true
	ac := NewAccountant(Accounting{Every: 40 * time.Millisecond, Workers: 1})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		ac.Run(ctx, func() []Shelf {
			return []Shelf{{Share: "/a", Name: "a", Book: good}, {Share: "/b", Name: "b", Book: bad}}
		})
	}()
	for end := time.Now().Add(10 * time.Second); good.walks("v") < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("the volume was walked %d times in 10 s", good.walks("v"))
		}
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	ac.mu.Lock()
	defer ac.mu.Unlock()
	for name, l := range ac.ledger {
		if l.running {
			t.Errorf("a pass over %s still runs", name)
		}
	}
}
