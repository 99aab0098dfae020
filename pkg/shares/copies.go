package shares

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"

	"github.com/nfsdir/nfsdir/pkg/provision"
	"github.com/nfsdir/nfsdir/pkg/treecopy"
	"github.com/nfsdir/nfsdir/pkg/usage"
	"github.com/nfsdir/nfsdir/pkg/volumeid"
)

// Copying configures the background copies of snapshots, restores and
// clones.
type Copying struct {
	// Workers is how many copies run at once; more wait their turn.
	Workers int
	// Copier copies each tree; its zero value means treecopy.Default.
	Copier treecopy.Copier
	// Rate bounds the entries all copies make per second (0: no bound).
	Rate float64
	// Remote has agents on the server copy the trees of volumes that name
	// one (copyAgent); nil: every copy goes through the
	// share mount.
	Remote provision.RemoteCopier
	// MinBackoff and MaxBackoff bound the wait before a failed copy is
	// tried again (the next call that asks for it starts it).
	MinBackoff, MaxBackoff time.Duration
}

// copies runs the copies of one Set: at most one attempt per snapshot or
// filling volume at a time, at most Workers at once, on the Set's
// background context, so that a copy outlives the call that started it
// and a restart resumes it (the next call that asks finds it unfinished
// on the share and starts it again).
type copies struct {
	cfg  Copying
	sem  chan struct{}
	mu   sync.Mutex
	jobs map[string]*copyJob

	running, completed, failed atomic.Int64
	bytes                      atomic.Int64
	byMethod                   [3]atomic.Int64
}

// copyJob is the latest attempt at one copy.
type copyJob struct {
	running   bool
	done      chan struct{} // closed when the running attempt ends
	progress  treecopy.Progress
	err       error // the last attempt's, while in back-off
	failures  int
	notBefore time.Time
}

// CopyState is what a caller learns of a copy it asked for.
type CopyState struct {
	Running        bool  // an attempt is running or waiting for a worker
	Entries, Bytes int64 // how far the running attempt has come
	Err            error // the last attempt's failure, until the next attempt
}

func newCopies(cfg Copying) *copies {
	if cfg.Workers <= 0 {
		cfg.Workers = 2
	}
	if cfg.Copier.MaxOpen == 0 {
		cfg.Copier = treecopy.Default
	}
	if cfg.Rate > 0 && cfg.Copier.Limit == nil {
		cfg.Copier.Limit = &usage.Rate{PerSecond: cfg.Rate, Burst: max(1, int(cfg.Rate/10))}
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = time.Second
	}
	if cfg.MaxBackoff < cfg.MinBackoff {
		cfg.MaxBackoff = 5 * time.Minute
	}
	return &copies{cfg: cfg, sem: make(chan struct{}, cfg.Workers), jobs: map[string]*copyJob{}}
}

// copyFn is one attempt at a copy.
type copyFn func(ctx context.Context, c treecopy.Copier) (treecopy.Result, error)

// ensure starts an attempt at the copy named name unless one is running or
// the last one failed less than its back-off ago, waits up to wait for the
// attempt to end, and returns the copy's state. A copy that succeeded, or
// whose subject is gone, leaves no state behind: the share says the rest.
func (s *Set) ensure(share *Share, name string, run copyFn, wait time.Duration) CopyState {
	cp := s.copies
	cp.mu.Lock()
	j := cp.jobs[name]
	if j == nil {
		j = &copyJob{}
		cp.jobs[name] = j
	}
	if !j.running && time.Now().After(j.notBefore) && s.bg.Err() == nil {
		j.running, j.done, j.err = true, make(chan struct{}), nil
		j.progress = treecopy.Progress{}
		s.wg.Add(1)
		go s.attempt(share, name, j, run)
	}
	done := j.done
	cp.mu.Unlock()
	if done != nil && wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-done:
		case <-t.C:
		}
		t.Stop()
	}
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.jobs[name] != j {
		return CopyState{}
	}
	return CopyState{Running: j.running, Entries: j.progress.Entries.Load(), Bytes: j.progress.Bytes.Load(), Err: j.err}
}

// attempt runs one attempt at the copy name and records its outcome.
func (s *Set) attempt(share *Share, name string, j *copyJob, run copyFn) {
	defer s.wg.Done()
	cp := s.copies
	var res treecopy.Result
	var err error
	select {
	case cp.sem <- struct{}{}:
		cp.running.Add(1)
		c := cp.cfg.Copier
		c.Progress = &j.progress
		res, err = run(s.bg, c)
		cp.running.Add(-1)
		<-cp.sem
	case <-s.bg.Done():
		err = s.bg.Err()
	}
	cp.bytes.Add(res.Bytes)
	for m := range res.ByMethod {
		cp.byMethod[m].Add(res.ByMethod[m])
	}
	cp.mu.Lock()
	defer cp.mu.Unlock()
	j.running = false
	close(j.done)
	switch {
	case err == nil:
		cp.completed.Add(1)
		delete(cp.jobs, name)
		klog.Infof("copy %s on %s done: %d files, %d directories, %d bytes in %s (clone %d, copy_file_range %d, read/write %d)", name, share.Path, res.Files, res.Dirs, res.Bytes, res.Took.Round(time.Millisecond), res.ByMethod[treecopy.Clone], res.ByMethod[treecopy.CopyRange], res.ByMethod[treecopy.ReadWrite])
	case errors.Is(err, provision.ErrGone) || s.bg.Err() != nil:
		delete(cp.jobs, name)
	default:
		cp.failed.Add(1)
		j.failures++
		backoff := cp.cfg.MinBackoff << min(j.failures-1, 20)
		j.err, j.notBefore = err, time.Now().Add(min(backoff, cp.cfg.MaxBackoff))
		klog.Warningf("copy %s on %s (attempt %d): %v; the next call that asks for it tries again after %s", name, share.Path, j.failures, err, min(backoff, cp.cfg.MaxBackoff))
	}
	if err != nil {
		s.Purge(share) // an attempt's copy may be in the trash
	}
}

// snapshotJob and fillJob name the copies of a snapshot and of a volume
// being filled.
func snapshotJob(id volumeid.ID) string { return "snapshot " + id.Key + "." + id.Token }
func fillJob(id volumeid.ID) string     { return "volume " + id.Key + "." + id.Token }

// forget drops what is kept of the copy name between attempts (its last
// failure and back-off) once its subject is deleted: nothing asks for it
// again, and the Set keeps no state for copies that are gone. A running
// attempt finds its subject gone itself (provision.ErrGone).
func (cp *copies) forget(name string) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if j := cp.jobs[name]; j != nil && !j.running {
		delete(cp.jobs, name)
	}
}

// ForgetFill drops what is kept of the fill of the volume of id; call it
// once the volume is deleted.
func (s *Set) ForgetFill(id volumeid.ID) { s.copies.forget(fillJob(id)) }

// CopyStats are the copies' figures for the metrics.
type CopyStats struct {
	Running, Completed, Failed int64
	Bytes                      int64
	ByMethod                   [3]int64 // files, by treecopy.Method
	// RunningEntries and RunningBytes are how far the attempts running
	// now have come, together: entries looked at (archive entries, for a
	// restore) and bytes of file data written.
	RunningEntries, RunningBytes int64
}

// Copies returns the copies' figures.
func (s *Set) Copies() CopyStats {
	cp := s.copies
	st := CopyStats{Running: cp.running.Load(), Completed: cp.completed.Load(), Failed: cp.failed.Load(), Bytes: cp.bytes.Load()}
	for m := range st.ByMethod {
		st.ByMethod[m] = cp.byMethod[m].Load()
	}
	cp.mu.Lock()
	defer cp.mu.Unlock()
	for _, j := range cp.jobs {
		if j.running {
			st.RunningEntries += j.progress.Entries.Load()
			st.RunningBytes += j.progress.Bytes.Load()
		}
	}
	return st
}

// SnapshotState is a snapshot as a caller sees it.
type SnapshotState struct {
	ID       volumeid.ID
	Snapshot *provision.Snapshot
	Ready    bool
	Copy     CopyState // while not ready
}

// snapshotState returns the state of the snapshot s of the share, starting
// its copy when it is not complete and no attempt runs (a restart, a new
// leader), and waiting up to wait for it.
func (s *Set) snapshotState(a *provision.Area, share *Share, id volumeid.ID, snap *provision.Snapshot, wait time.Duration) (SnapshotState, error) {
	st := SnapshotState{ID: id, Snapshot: snap}
	ready, err := a.Snapshots().Ready(snap)
	if err != nil || ready {
		st.Ready = ready
		return st, err
	}
	st.Copy = s.ensure(share, snapshotJob(id), func(ctx context.Context, c treecopy.Copier) (treecopy.Result, error) {
		return a.Snapshots().Fill(ctx, id, c)
	}, wait)
	st.Ready, err = a.Snapshots().Ready(snap)
	return st, err
}

// FillState returns whether the volume rec of id is still being filled,
// starting its copy when no attempt runs and waiting up to wait for it.
func (s *Set) FillState(a *provision.Area, share *Share, id volumeid.ID, wait time.Duration) (filling bool, st CopyState, err error) {
	st = s.ensure(share, fillJob(id), func(ctx context.Context, c treecopy.Copier) (treecopy.Result, error) {
		return a.Fills().Fill(ctx, id, c)
	}, wait)
	rec, err := a.Lookup(id)
	if err != nil {
		return true, st, err
	}
	if rec == nil {
		return false, st, provision.ErrGone
	}
	return rec.Filling && !rec.Copied, st, nil
}
