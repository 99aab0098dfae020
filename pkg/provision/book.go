package provision

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nfsdir/nfsdir/pkg/capacity"
	"github.com/nfsdir/nfsdir/pkg/usage"
)

// Book is the room of an Area the usage accountant works through: the
// share's records as usage.Volumes, their figures, and the count of one
// volume's directory.
type Book struct{ a *Area }

// Book returns the area's book for the usage accountant.
func (a *Area) Book() Book { return Book{a} }

var _ usage.Book = Book{}

// Names lists the records directory (Inventory.Names).
func (b Book) Names() (keys, removals []string, err error) { return b.a.Inventory().Names() }

// SettleRemovals settles the removals cut short (Inventory.SettleRemovals).
func (b Book) SettleRemovals(removals []string, grace time.Duration) int {
	return b.a.Inventory().SettleRemovals(removals, grace)
}

// DropFigures removes the figures of records not among keys (sorted).
func (b Book) DropFigures(keys []string) { b.a.Figures().Drop(keys) }

// Volume reads the record under key as a usage.Volume whose Ref is the
// *Record.
func (b Book) Volume(key string) (usage.Volume, bool, error) {
	rec, err := b.a.Inventory().Record(key)
	if err != nil || rec == nil {
		return usage.Volume{}, false, err
	}
	v := usage.Volume{Key: key, SubDir: rec.SubDir, Token: rec.Token, Agent: rec.QuotaAgent,
		Own: !rec.Shared && rec.FileID != 0, Capacity: rec.CapacityBytes, Ref: rec}
	if rec.SharedDir {
		v.Capacity = 0
	}
	return v, true, nil
}

// record returns the *Record a usage.Volume of this book carries.
func record(v usage.Volume) (*Record, error) {
	rec, ok := v.Ref.(*Record)
	if !ok || rec == nil {
		return nil, fmt.Errorf("usage of record %s: no record with it", v.Key)
	}
	return rec, nil
}

// Figure returns v's stored figure (Figures.Of).
func (b Book) Figure(v usage.Volume) (capacity.Figure, bool, error) {
	rec, err := record(v)
	if err != nil {
		return capacity.Figure{}, false, err
	}
	return b.a.Figures().Of(rec)
}

// Count counts, with w, what v's directory uses, and stores the figure.
// counted is false (and nothing is stored) for a shared volume's record
// (its shared directory's stands for it), a record not yet sealed, or a
// directory that is missing; a directory that is not the one recorded is
// an error.
func (b Book) Count(ctx context.Context, v usage.Volume, w usage.Walker) (fig capacity.Figure, counted bool, err error) {
	rec, err := record(v)
	if err != nil || !v.Own {
		return fig, false, err
	}
	fd, err := b.a.openVolumeDir(rec)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fig, false, nil
		}
		return fig, false, err
	}
	defer unix.Close(fd)
	res, err := w.Count(ctx, fd)
	if err != nil {
		return fig, false, fmt.Errorf("count %q: %w", rec.SubDir, err)
	}
	fig, err = b.Store(v, res)
	return fig, err == nil, err
}

// Store stores res as v's figure, as counted now: by Count's walk, or by
// the server's own accounting (a server agent, which checks the directory
// is v's itself).
func (b Book) Store(v usage.Volume, res usage.Result) (capacity.Figure, error) {
	fig := capacity.Figure{Token: v.Token, Bytes: res.Bytes, Inodes: res.Inodes, Counted: time.Now().UTC(), Took: res.Took}
	return fig, b.a.Figures().store(v.Key, fig)
}

// openVolumeDir opens rec's directory without following any symlink and
// checks it is the directory sealed into rec.
func (a *Area) openVolumeDir(rec *Record) (int, error) {
	f, err := a.seals().openDir(rec.SubDir)
	if err != nil {
		return -1, err
	}
	st, err := f.Stat()
	if err == nil {
		err = a.seals().checkSealed(rec, st)
	}
	if err != nil {
		f.Close()
		return -1, err
	}
	nfd, err := unix.Dup(int(f.Fd()))
	f.Close()
	return nfd, err
}
