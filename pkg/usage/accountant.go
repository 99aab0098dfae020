package usage

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"

	"github.com/nfsdir/nfsdir/pkg/capacity"
)

// Accounting configures the background count of what each volume uses.
type Accounting struct {
	// Every is how often each volume is counted, at most; 0 counts
	// nothing.
	Every time.Duration
	// Rate bounds the entries looked at per second, all counts of the
	// controller together; 0: unbounded.
	Rate float64
	// Workers is how many volumes are counted at once.
	Workers int
	// Server, when set, reads the usage of volumes whose size a server
	// agent enforces from the server's own accounting (exact, and one
	// call instead of a walk); nil walks every volume.
	Server ServerUsage
}

// ServerUsage reads what a volume's directory uses from the NFS server's
// own accounting: the server agent at endpoint, for the directory subDir
// of share with the volume's creation token.
type ServerUsage interface {
	Usage(ctx context.Context, endpoint, share, subDir, token string) (Result, error)
}

// Volume is what the accountant needs to know of one recorded volume.
type Volume struct {
	Key    string // its record's key
	SubDir string // its directory
	Token  string // its directory's creation token
	// Agent is the endpoint of the server agent that enforces its size
	// and can say what it uses; "" when none does.
	Agent string
	// Own is true for a volume whose directory is its own and sealed:
	// the only kind a server agent may answer for (a shared volume's
	// figure is its shared directory's).
	Own bool
	// Capacity is the size a count compares its figure with; 0: none
	// (a shared directory is never over).
	Capacity int64
	// Ref is the Book's own record of the volume, handed back to it.
	Ref any
}

// Book is what the accountant needs of one share: its records, the
// figures stored beside them, and the count of one volume's tree. A
// pass over a share lists the records once, in the background.
type Book interface {
	// Names lists the records: their keys, sorted, and the names of
	// records a removal took aside.
	Names() (keys, removals []string, err error)
	// SettleRemovals finishes the removals among removals interrupted
	// at least grace ago.
	SettleRemovals(removals []string, grace time.Duration) int
	// DropFigures removes the figures of records not among keys.
	DropFigures(keys []string)
	// Volume reads the record under key; ok is false when there is none.
	Volume(key string) (v Volume, ok bool, err error)
	// Figure returns v's stored figure; ok is false when none was
	// counted yet.
	Figure(v Volume) (fig capacity.Figure, ok bool, err error)
	// Count walks v's directory with w and stores the figure; counted is
	// false when v has nothing of its own to count (a shared volume, a
	// directory not sealed yet, missing or replaced).
	Count(ctx context.Context, v Volume, w Walker) (fig capacity.Figure, counted bool, err error)
	// Store stores res, from the server's accounting, as v's figure.
	Store(v Volume, res Result) (capacity.Figure, error)
}

// Shelf is one share the accountant counts: Share is its path as clients
// mount it, Name the export, for messages and the metrics' labels.
type Shelf struct {
	Share, Name string
	Book        Book
}

// Accountant counts, share by share, what every recorded volume uses and
// stores the figures on the share for the nodes to read. A pass over a
// share lists its records (in the background, never on a request path),
// counts those due, and removes figures whose record is gone; a restarted
// controller, or a second one, takes up the schedule from the figures'
// own times.
type Accountant struct {
	cfg    Accounting
	walker Walker
	sem    chan struct{}
	// settleAfter is how long a record taken aside by a removal stays
	// before a pass settles it: a removal in progress takes milliseconds.
	settleAfter time.Duration

	counts, failures, entries atomic.Int64
	server                    atomic.Int64 // counts the server's accounting answered

	mu     sync.Mutex
	ledger map[string]*ledger // by share name
}

// ledger is what the accountant knows of one share.
type ledger struct {
	running  bool
	lastPass time.Time
	due      map[string]time.Time // by record key: when to count it next
	over     map[string]int64     // by record key: bytes over capacity
}

// NewAccountant returns an Accountant for cfg.
func NewAccountant(cfg Accounting) *Accountant {
	w := DefaultWalker
	if cfg.Rate > 0 {
		w.Limit = &Rate{PerSecond: cfg.Rate, Burst: max(1, int(cfg.Rate/10))}
	}
	return &Accountant{cfg: cfg, walker: w, sem: make(chan struct{}, max(1, cfg.Workers)),
		settleAfter: time.Minute, ledger: map[string]*ledger{}}
}

// Run starts a pass over every share shelves returns whose last pass is
// older than a quarter of Every (the list of records costs a READDIR per
// ~100 volumes), checking every eighth of Every, until ctx ends; it
// returns when ctx has ended and every pass it started has.
func (ac *Accountant) Run(ctx context.Context, shelves func() []Shelf) {
	var wg sync.WaitGroup
	defer wg.Wait()
	tick := time.NewTicker(max(ac.cfg.Every/8, 500*time.Millisecond))
	defer tick.Stop()
	for {
		for _, sh := range shelves() {
			if l := ac.startPass(sh.Name); l != nil {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ac.pass(ctx, sh, l)
				}()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// startPass returns the ledger of the share name when a pass over it is
// due and none runs, marked as running; nil otherwise.
func (ac *Accountant) startPass(name string) *ledger {
	ac.mu.Lock()
	defer ac.mu.Unlock()
	l := ac.ledger[name]
	if l == nil {
		l = &ledger{due: map[string]time.Time{}, over: map[string]int64{}}
		ac.ledger[name] = l
	}
	if l.running || time.Since(l.lastPass) < ac.cfg.Every/4 {
		return nil
	}
	l.running = true
	return l
}

// pass counts the volumes of one share that are due.
func (ac *Accountant) pass(ctx context.Context, sh Shelf, l *ledger) {
	defer func() {
		ac.mu.Lock()
		l.running, l.lastPass = false, time.Now()
		ac.mu.Unlock()
	}()
	keys, removals, err := sh.Book.Names()
	if err != nil {
		klog.Warningf("usage count of %s: %v", sh.Name, err)
		return
	}
	sh.Book.DropFigures(keys)
	// The pass is the one background listing of the records: it also
	// finishes record removals left half-way.
	sh.Book.SettleRemovals(removals, ac.settleAfter)
	live := make(map[string]bool, len(keys))
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, key := range keys {
		live[key] = true
		if time.Now().Before(ac.due(sh.Book, l, key)) {
			continue
		}
		select {
		case ac.sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-ac.sem }()
			ac.count(ctx, sh, l, key)
		}()
	}
	wg.Wait()
	ac.mu.Lock()
	for k := range l.due {
		if !live[k] {
			delete(l.due, k)
			delete(l.over, k)
		}
	}
	ac.mu.Unlock()
}

// due returns when the volume under key is next due: from the ledger, or
// for a volume the ledger does not know yet, from the time of its stored
// figure (counted by an earlier or another controller).
func (ac *Accountant) due(b Book, l *ledger, key string) time.Time {
	ac.mu.Lock()
	due, known := l.due[key]
	ac.mu.Unlock()
	if known {
		return due
	}
	v, ok, err := b.Volume(key)
	if err != nil || !ok {
		return time.Time{}
	}
	fig, ok, err := b.Figure(v)
	if err != nil || !ok {
		return time.Time{}
	}
	return fig.Counted.Add(ac.cfg.Every)
}

// count counts the volume under key, from its server agent's accounting
// or by a walk, and notes when it is due next and whether it is over its
// capacity.
func (ac *Accountant) count(ctx context.Context, sh Shelf, l *ledger, key string) {
	start := time.Now()
	v, ok, err := sh.Book.Volume(key)
	var fig capacity.Figure
	counted := false
	if err == nil && ok {
		if fig, counted, err = ac.fromServer(ctx, sh, v); !counted && err == nil {
			fig, counted, err = sh.Book.Count(ctx, v, ac.walker)
		}
	}
	ac.mu.Lock()
	defer ac.mu.Unlock()
	l.due[key] = start.Add(ac.cfg.Every)
	delete(l.over, key)
	if err != nil {
		if ctx.Err() == nil {
			ac.failures.Add(1)
			klog.Warningf("usage count of record %s on %s: %v", key, sh.Name, err)
		}
		return
	}
	if !counted {
		return
	}
	ac.counts.Add(1)
	ac.entries.Add(fig.Inodes)
	if v.Capacity > 0 && fig.Bytes > v.Capacity {
		l.over[key] = fig.Bytes - v.Capacity
	}
	klog.V(4).Infof("usage of %q on %s: %d bytes, %d inodes (counted in %s)", v.SubDir, sh.Name, fig.Bytes, fig.Inodes, fig.Took)
}

// fromServer asks the server agent of v what its directory uses, and
// stores the figure; counted is false (nothing stored, no error) when the
// volume has no agent or the agent cannot answer, and then the walk
// counts it.
func (ac *Accountant) fromServer(ctx context.Context, sh Shelf, v Volume) (fig capacity.Figure, counted bool, err error) {
	if ac.cfg.Server == nil || v.Agent == "" || !v.Own {
		return fig, false, nil
	}
	res, err := ac.cfg.Server.Usage(ctx, v.Agent, sh.Share, v.SubDir, v.Token)
	if err != nil {
		if ctx.Err() == nil {
			klog.Warningf("usage of %q on %s from its server agent: %v; counting it by a walk", v.SubDir, sh.Name, err)
		}
		return fig, false, nil
	}
	ac.server.Add(1)
	fig, err = sh.Book.Store(v, res)
	return fig, err == nil, err
}

// Stats are the accountant's figures for the metrics.
type Stats struct {
	Counts, Failures, Entries int64
	FromServer                int64              // counts answered by a server agent
	OverVolumes               map[string]float64 // by share
	OverBytes                 map[string]float64 // by share
}

// Stats returns the accountant's figures so far.
func (ac *Accountant) Stats() Stats {
	st := Stats{Counts: ac.counts.Load(), Failures: ac.failures.Load(), Entries: ac.entries.Load(), FromServer: ac.server.Load(),
		OverVolumes: map[string]float64{}, OverBytes: map[string]float64{}}
	ac.mu.Lock()
	defer ac.mu.Unlock()
	for name, l := range ac.ledger {
		st.OverVolumes[name] = float64(len(l.over))
		var b int64
		for _, x := range l.over {
			b += x
		}
		st.OverBytes[name] = float64(b)
	}
	return st
}
