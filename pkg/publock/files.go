package publock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// noLocks logs once that a share's claims cannot be locked.
var noLocks sync.Once

// lockPoll is how often a busy claim file's lock is tried again; another
// node holds it only while it reads or writes the claim.
const lockPoll = 20 * time.Millisecond

// Files are the claims of one share as one node sees them: Root is the
// share's .nfsdir/nodes directory, mounted read-write.
type Files struct {
	Root  *os.Root
	Node  string
	Lapse time.Duration // how long a claim not renewed stays live
}

// Take makes the node the holder of the claim name for volume. It answers
// nil when the claim was free, lapsed or already the node's, and a
// *HeldError naming the holder when another node's claim is live. took
// names the node whose lapsed claim was taken over, if any. ctx bounds the
// wait for the claim file's lock.
func (f Files) Take(ctx context.Context, name, volume string) (took string, err error) {
	file, cur, err := f.open(ctx, name, true)
	if err != nil {
		return "", err
	}
	defer file.Close() // releases the lock
	if !cur.Free() && cur.Node != f.Node {
		live, err := f.live(file)
		if err != nil {
			return "", err
		}
		if live {
			return "", &HeldError{Claim: cur, Name: name}
		}
		took = cur.Node
	}
	return took, write(file, Claim{Node: f.Node, Volume: volume})
}

// Renew touches the node's claim name, so that it stays live for another
// lapse. A claim another node holds now (it took it over after this node's
// lapsed) is a *HeldError and is left alone; a missing or free one is taken
// again.
func (f Files) Renew(ctx context.Context, name, volume string) error {
	file, cur, err := f.open(ctx, name, true)
	if err != nil {
		return err
	}
	defer file.Close()
	if !cur.Free() && cur.Node != f.Node {
		return &HeldError{Claim: cur, Name: name}
	}
	if cur.Node != f.Node {
		return write(file, Claim{Node: f.Node, Volume: volume})
	}
	return touch(file)
}

// Drop frees the claim name if the node holds it; another node's claim, or
// none, is left as it is.
func (f Files) Drop(ctx context.Context, name string) error {
	file, cur, err := f.open(ctx, name, false)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer file.Close()
	if cur.Node != f.Node {
		return nil
	}
	if err := file.Truncate(0); err != nil {
		return fmt.Errorf("free claim %s: %w", name, err)
	}
	return file.Sync()
}

// open locks the claim file name (lock) and reads the claim in it. An
// unreadable claim is a write cut in the middle, and reads as free:
// whoever made it takes it again at its next renewal or publish.
func (f Files) open(ctx context.Context, name string, create bool) (*os.File, Claim, error) {
	file, err := f.lock(ctx, name, create)
	if err != nil {
		return nil, Claim{}, err
	}
	cur, err := read(file)
	if err != nil && !errors.Is(err, ErrUnreadable) {
		file.Close()
		return nil, Claim{}, err
	}
	return file, cur, nil
}

// lock opens the claim file name (creating it if create) and takes an
// exclusive lock on it, waiting while another node holds it until ctx
// ends. The lock lasts until the file is closed.
func (f Files) lock(ctx context.Context, name string, create bool) (*os.File, error) {
	flags := os.O_RDWR
	if create {
		flags |= os.O_CREATE
	}
	file, err := f.Root.OpenFile(name, flags, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open claim %s: %w", name, err)
	}
	for {
		lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart}
		err := unix.FcntlFlock(file.Fd(), unix.F_OFD_SETLK, &lk)
		if err == nil {
			return file, nil
		}
		if errors.Is(err, unix.ENOLCK) || errors.Is(err, unix.EOPNOTSUPP) {
			// No NFS locks here (NFSv3 without rpc.statd on the node,
			// or a nolock mount): the claim still refuses other nodes,
			// but two nodes taking a free claim in the same instant
			// could both win; the loser finds out at its next renewal.
			noLocks.Do(func() {
				klog.Warningf("claims of single-node volumes: the NFS client cannot lock %s (%v; on NFSv3 the node needs rpc.statd); claims are taken without the lock", name, err)
			})
			return file, nil
		}
		if !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EACCES) && !errors.Is(err, unix.EINTR) {
			file.Close()
			return nil, fmt.Errorf("lock claim %s: %w", name, err)
		}
		select {
		case <-ctx.Done():
			file.Close()
			return nil, fmt.Errorf("lock claim %s: another node keeps it locked: %w", name, ctx.Err())
		case <-time.After(lockPoll):
		}
	}
}

// live reports whether the claim in file (locked) was renewed within the
// lapse, by the server's clock: its mtime against that of the node's
// clock file, touched now.
func (f Files) live(file *os.File) (bool, error) {
	st, err := file.Stat()
	if err != nil {
		return false, err
	}
	clock, err := f.Root.OpenFile(ClockName(f.Node), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return false, fmt.Errorf("open clock file: %w", err)
	}
	defer clock.Close()
	if err := touch(clock); err != nil {
		return false, err
	}
	now, err := clock.Stat()
	if err != nil {
		return false, err
	}
	return now.ModTime().Sub(st.ModTime()) < f.Lapse, nil
}

func read(file *os.File) (Claim, error) {
	b := make([]byte, maxClaim+1)
	n, err := file.ReadAt(b, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return Claim{}, fmt.Errorf("read claim: %w", err)
	}
	return Parse(b[:n])
}

func write(file *os.File, c Claim) error {
	if err := file.Truncate(0); err != nil {
		return fmt.Errorf("write claim: %w", err)
	}
	if _, err := file.WriteAt(c.Marshal(), 0); err != nil {
		return fmt.Errorf("write claim: %w", err)
	}
	// Written and on the server before the caller acts on it; the write
	// also sets the claim's mtime, by the server's clock.
	if err := file.Sync(); err != nil {
		return fmt.Errorf("write claim: %w", err)
	}
	return nil
}

// touch sets the file's times to the server's now: utimensat with
// UTIME_NOW, which the NFS client sends as "set to server time".
func touch(file *os.File) error {
	if err := unix.Utimes("/proc/self/fd/"+strconv.Itoa(int(file.Fd())), nil); err != nil {
		return fmt.Errorf("renew claim: %w", err)
	}
	return nil
}
