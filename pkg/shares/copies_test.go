package shares

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nfsdir/nfsdir/pkg/treecopy"
	"github.com/nfsdir/nfsdir/pkg/volumeid"
)

// A failed copy is kept with its error and back-off until its subject is
// deleted; then nothing of it stays.
func TestFailedCopiesAreForgottenWithTheirSubject(t *testing.T) {
	s := &Set{copies: newCopies(Copying{MinBackoff: time.Hour})}
	s.bg, s.stop = context.WithCancel(context.Background())
	defer s.stop()
	id := volumeid.ID{Key: volumeid.KeyForDir("v"), Token: "aaaaaaaa"}
	calls := 0
	fail := func(context.Context, treecopy.Copier) (treecopy.Result, error) {
		calls++
		return treecopy.Result{}, errors.New("server said no")
	}
	if st := s.ensure(&Share{}, fillJob(id), fail, time.Second); st.Err == nil || st.Running {
		t.Fatalf("state after a failed attempt: %+v", st)
	}
	if st := s.ensure(&Share{}, fillJob(id), fail, time.Second); st.Err == nil || calls != 1 {
		t.Errorf("within the back-off: %+v after %d attempts; want the kept error and no new attempt", st, calls)
	}
	s.ForgetFill(id)
	s.copies.mu.Lock()
	n := len(s.copies.jobs)
	s.copies.mu.Unlock()
	if n != 0 {
		t.Errorf("%d copies kept after their volume was deleted", n)
	}
	s.wg.Wait()
}

// The running copies' progress is in the figures while they run, and
// gone once they end.
func TestRunningCopiesReportTheirProgress(t *testing.T) {
	s := &Set{copies: newCopies(Copying{MinBackoff: time.Hour})}
	s.bg, s.stop = context.WithCancel(context.Background())
	defer s.stop()
	id := volumeid.ID{Key: volumeid.KeyForDir("v"), Token: "aaaaaaaa"}
	halfway, finish := make(chan struct{}), make(chan struct{})
	run := func(_ context.Context, c treecopy.Copier) (treecopy.Result, error) {
		c.Progress.Entries.Add(3)
		c.Progress.Bytes.Add(4096)
		close(halfway)
		<-finish
		return treecopy.Result{}, nil
	}
	s.ensure(&Share{}, fillJob(id), run, 0)
	<-halfway
	if st := s.Copies(); st.Running != 1 || st.RunningEntries != 3 || st.RunningBytes != 4096 {
		t.Errorf("while it runs: %+v", st)
	}
	close(finish)
	s.wg.Wait()
	if st := s.Copies(); st.Running != 0 || st.RunningEntries != 0 || st.RunningBytes != 0 {
		t.Errorf("after it ended: %+v", st)
	}
}
