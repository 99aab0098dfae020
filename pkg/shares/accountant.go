package shares

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"

	"github.com/nfsdir/nfsdir/pkg/capacity"
	"github.com/nfsdir/nfsdir/pkg/provision"
	"github.com/nfsdir/nfsdir/pkg/usage"
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
	// Server, when set, reads the usage of volumes whose size a quota
	// agent enforces from the server's own accounting (exact, and one
	// call instead of a walk); nil walks every volume.
	Server ServerUsage
}

// ServerUsage reads what a volume's directory uses from the NFS server's
// own accounting: the quota agent at endpoint, for the directory subDir of
// share with the volume's creation token.
type ServerUsage interface {
	Usage(ctx context.Context, endpoint, share, subDir, token string) (usage.Result, error)
}

// accountant counts, share by share, what every recorded volume uses and
// stores the figures on the share for the nodes to read. A pass over a
// share lists its records (in the background, never on a request path),
// counts those due, and removes figures whose record is gone; a restarted
// controller, or a second one, takes up the schedule from the figures'
// own times.
type accountant struct {
	cfg    Accounting
	walker usage.Walker
	sem    chan struct{}

	counts, failures, entries atomic.Int64
	server                    atomic.Int64 // counts the server's accounting answered

	mu     sync.Mutex
	ledger map[string]*ledger // by share
}

// ledger is what the accountant knows of one share.
type ledger struct {
	running  bool
	lastPass time.Time
	due      map[string]time.Time // by record key: when to count it next
	over     map[string]int64     // by record key: bytes over capacity
}

func newAccountant(cfg Accounting) *accountant {
	w := usage.DefaultWalker
	if cfg.Rate > 0 {
		w.Limit = &usage.Rate{PerSecond: cfg.Rate, Burst: max(1, int(cfg.Rate/10))}
	}
	return &accountant{cfg: cfg, walker: w, sem: make(chan struct{}, max(1, cfg.Workers)), ledger: map[string]*ledger{}}
}

// account starts a pass over every share with an open Area whose last pass
// is older than a quarter of Every (the list of records costs a READDIR
// per ~100 volumes), checking every eighth of Every, until ctx ends.
func (s *Set) account(ctx context.Context) {
	ac := s.acct
	tick := time.NewTicker(max(ac.cfg.Every/8, 500*time.Millisecond))
	defer tick.Stop()
	for {
		s.mu.Lock()
		open := make([]*openArea, 0, len(s.areas))
		for _, oa := range s.areas {
			open = append(open, oa)
		}
		s.mu.Unlock()
		for _, oa := range open {
			name := oa.share.Export.String()
			ac.mu.Lock()
			l := ac.ledger[name]
			if l == nil {
				l = &ledger{due: map[string]time.Time{}, over: map[string]int64{}}
				ac.ledger[name] = l
			}
			start := !l.running && time.Since(l.lastPass) >= ac.cfg.Every/4
			if start {
				l.running = true
			}
			ac.mu.Unlock()
			if start {
				s.wg.Add(1)
				go func() {
					defer s.wg.Done()
					ac.pass(ctx, oa.share.Export.Share, name, oa.area, l)
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

// settleAfter is how long a record taken aside by a removal stays before
// a pass settles it: a removal in progress takes milliseconds.
var settleAfter = time.Minute

// pass counts the volumes of one share that are due (share: its path as
// clients mount it; name: the export, for messages).
func (ac *accountant) pass(ctx context.Context, share, name string, a *provision.Area, l *ledger) {
	defer func() {
		ac.mu.Lock()
		l.running, l.lastPass = false, time.Now()
		ac.mu.Unlock()
	}()
	keys, removals, err := a.Inventory().Names()
	if err != nil {
		klog.Warningf("usage count of %s: %v", name, err)
		return
	}
	a.Figures().Drop(keys)
	// The pass is the one background listing of the records: it also
	// finishes record removals left half-way.
	a.Inventory().SettleRemovals(removals, settleAfter)
	live := make(map[string]bool, len(keys))
	var wg sync.WaitGroup
	for _, key := range keys {
		live[key] = true
		ac.mu.Lock()
		due, known := l.due[key]
		ac.mu.Unlock()
		if !known {
			due = ac.resume(a, key)
		}
		if time.Now().Before(due) {
			continue
		}
		select {
		case ac.sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-ac.sem }()
			ac.count(ctx, share, name, a, l, key)
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

// resume returns when the volume under key is next due, from the time of
// its stored figure (counted by an earlier or another controller).
func (ac *accountant) resume(a *provision.Area, key string) time.Time {
	rec, err := a.Inventory().Record(key)
	if err != nil || rec == nil {
		return time.Time{}
	}
	fig, ok, err := a.Figures().Of(rec)
	if err != nil || !ok {
		return time.Time{}
	}
	return fig.Counted.Add(ac.cfg.Every)
}

func (ac *accountant) count(ctx context.Context, share, name string, a *provision.Area, l *ledger, key string) {
	start := time.Now()
	rec, err := a.Inventory().Record(key)
	var fig capacity.Figure
	counted := false
	if err == nil {
		if fig, counted, err = ac.fromServer(ctx, share, name, a, key, rec); !counted && err == nil {
			fig, counted, err = a.Figures().Count(ctx, key, rec, ac.walker)
		}
	}
	ac.mu.Lock()
	defer ac.mu.Unlock()
	l.due[key] = start.Add(ac.cfg.Every)
	delete(l.over, key)
	if err != nil {
		if ctx.Err() == nil {
			ac.failures.Add(1)
			klog.Warningf("usage count of record %s on %s: %v", key, name, err)
		}
		return
	}
	if !counted {
		return
	}
	ac.counts.Add(1)
	ac.entries.Add(fig.Inodes)
	if rec.CapacityBytes > 0 && fig.Bytes > rec.CapacityBytes && !rec.SharedDir {
		l.over[key] = fig.Bytes - rec.CapacityBytes
	}
	klog.V(4).Infof("usage of %q on %s: %d bytes, %d inodes (counted in %s)", rec.SubDir, name, fig.Bytes, fig.Inodes, fig.Took)
}

// AccountingStats are the accountant's figures for the metrics.
type AccountingStats struct {
	Counts, Failures, Entries int64
	FromServer                int64              // counts answered by a quota agent
	OverVolumes               map[string]float64 // by share
	OverBytes                 map[string]float64 // by share
}

func (ac *accountant) stats() AccountingStats {
	st := AccountingStats{Counts: ac.counts.Load(), Failures: ac.failures.Load(), Entries: ac.entries.Load(), FromServer: ac.server.Load(),
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

// fromServer asks the quota agent of rec, the volume under key, what its
// directory uses, and stores the figure; counted is false (nothing
// stored, no error) when the volume has no agent or the agent cannot
// answer, and then the walk counts it.
func (ac *accountant) fromServer(ctx context.Context, share, name string, a *provision.Area, key string, rec *provision.Record) (fig capacity.Figure, counted bool, err error) {
	if ac.cfg.Server == nil || rec == nil || rec.QuotaAgent == "" || rec.Shared || rec.FileID == 0 {
		return fig, false, nil
	}
	res, err := ac.cfg.Server.Usage(ctx, rec.QuotaAgent, share, rec.SubDir, rec.Token)
	if err != nil {
		if ctx.Err() == nil {
			klog.Warningf("usage of %q on %s from its quota agent: %v; counting it by a walk", rec.SubDir, name, err)
		}
		return fig, false, nil
	}
	ac.server.Add(1)
	fig, err = a.Figures().Store(key, rec, res)
	return fig, err == nil, err
}
