package shares

import (
	"context"
	"encoding/base64"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/nfsdir/nfsdir/pkg/export"
	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/mountopts"
	"github.com/nfsdir/nfsdir/pkg/provision"
	"github.com/nfsdir/nfsdir/pkg/volumeid"
)

// Listed is one volume of a listing.
type Listed struct {
	ID       volumeid.ID
	Record   *provision.Record
	Problems []provision.Problem // with health only
}

// listInFlight is how many records of one share a listing of volumes
// reads at once: each is a few round trips to the server, which a
// listing one after the other would wait for in turn (10,000 volumes
// 1 ms away: about two minutes, past listShareTimeout).
const listInFlight = 16

// listShareTimeout bounds the work a listing does on one share: a share
// whose server does not answer is left out (and logged), not waited for.
const listShareTimeout = 30 * time.Second

// tokenPrefix marks the paging tokens List hands out.
const tokenPrefix = "nfsdir1."

// List returns at most max volumes (0: no bound) of every share this
// Set's state directory has mounted, in a stable order (by export, then
// record key), starting after token ("" for the start), and the token of
// the next page ("" at the end). The token is a position, not an index:
// volumes created or deleted between pages never shift it. With health,
// each volume is checked too (provision.Area.Health). A token List did
// not make is Aborted, as the CSI spec asks.
func (s *Set) List(ctx context.Context, token string, max int, health bool) ([]Listed, string, error) {
	return pageThrough(ctx, s, "volumes", token, max, nil, listInFlight, func(a *provision.Area) ([]string, error) { return a.Inventory().Keys() },
		func(a *provision.Area, share *Share, k knownExport, key string) (*Listed, error) {
			return s.lister().listed(a, share, k.e, key, health)
		},
		func(l Listed) volumeid.ID { return l.ID })
}

// pageThrough is a paged listing of what item makes of each key (from
// keys, sorted) of every share this Set's state directory has mounted (of
// the export only when only is set), in a stable order (export, then key),
// at most max items (0: no bound) starting after token, and the next
// page's token ("" at the end): a position, not an index, so that what is
// created or deleted between pages never shifts it. item returns nil for a
// key to leave out; id gives an item's position. Up to inFlight items are
// made at once (never more than the page has room for), and taken in key
// order. A share whose server does not answer is left out and logged
// (onShareBounded); a token pageThrough did not make is Aborted, as the
// CSI spec asks.
func pageThrough[T any](ctx context.Context, s *Set, what, token string, max int, only *export.Export, inFlight int,
	keys func(*provision.Area) ([]string, error), item func(*provision.Area, *Share, knownExport, string) (*T, error),
	id func(T) volumeid.ID) ([]T, string, error) {
	afterExport, afterKey, err := decodeToken(token)
	if err != nil {
		return nil, "", err
	}
	var out []T
	for _, k := range s.lister().exports() {
		if k.e.String() < afterExport || only != nil && k.e.String() != only.String() {
			continue
		}
		after := ""
		if k.e.String() == afterExport {
			after = afterKey
		}
		// fn fills a page of its own: after a timeout it may still run,
		// and must touch nothing of this call's.
		room, page := max-len(out), []T(nil)
		err := s.lister().onShareBounded(ctx, k.e, k.opts, func(a *provision.Area, share *Share) error {
			all, err := keys(a)
			if err != nil {
				return err
			}
			i, _ := slices.BinarySearch(all, after)
			rest := all[i:]
			if len(rest) > 0 && rest[0] == after {
				rest = rest[1:]
			}
			for len(rest) > 0 {
				if max > 0 && len(page) == room {
					return errPageFull
				}
				n := min(len(rest), inFlight)
				if n < 1 {
					n = 1
				}
				if max > 0 {
					n = min(n, room-len(page))
				}
				items, errs := make([]*T, n), make([]error, n)
				var wg sync.WaitGroup
				for j, key := range rest[:n] {
					wg.Add(1)
					go func() {
						defer wg.Done()
						items[j], errs[j] = item(a, share, k, key)
					}()
				}
				wg.Wait()
				rest = rest[n:]
				for j := range items {
					if errs[j] != nil {
						return errs[j]
					}
					if items[j] != nil {
						page = append(page, *items[j])
					}
				}
			}
			return nil
		})
		switch {
		case errors.Is(err, errPageFull):
			out = append(out, page...)
			last := id(out[len(out)-1])
			return out, encodeToken(last.Export.String(), last.Key), nil
		case err == nil:
			out = append(out, page...)
		case errors.Is(err, provision.ErrNoArea):
		case ctx.Err() != nil:
			return nil, "", fault.Wrap(fault.DeadlineExceeded, ctx.Err(), "listing %s", what)
		default:
			klog.Warningf("listing %s: share %s left out: %v", what, k.e, err)
		}
	}
	return out, "", nil
}

var errPageFull = errors.New("page full")

// onShareBounded runs fn on the share as On does, but returns after
// listShareTimeout (or ctx) even when fn is stuck in the kernel on a dead
// server; until that fn returns, the share is left out of listings at once,
// so at most one goroutine per share ever waits on it.
func (s lister) onShareBounded(ctx context.Context, e export.Export, opts mountopts.Options, fn func(*provision.Area, *Share) error) error {
	name := e.String()
	s.mu.Lock()
	if s.listing[name] {
		s.mu.Unlock()
		return fault.New(fault.Unavailable, "an earlier listing of share %s still waits for its server", name)
	}
	if s.listing == nil {
		s.listing = map[string]bool{}
	}
	s.listing[name] = true
	s.mu.Unlock()
	sctx, cancel := context.WithTimeout(ctx, listShareTimeout)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		err := s.On(sctx, e, opts, false, fn)
		// Unmarked before the answer is handed over: a listing that
		// follows this one at once must find the share free.
		s.mu.Lock()
		delete(s.listing, name)
		s.mu.Unlock()
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-sctx.Done():
		return fault.Wrap(fault.DeadlineExceeded, sctx.Err(), "share %s did not answer within %s", name, listShareTimeout)
	}
}

// listed returns the volume recorded under key, or nil for a key that
// holds no volume (gone, or a shared directory's record).
func (s lister) listed(a *provision.Area, share *Share, e export.Export, key string, health bool) (*Listed, error) {
	rec, err := a.Inventory().Record(key)
	if errors.Is(err, provision.ErrBadRecord) {
		// One unusable record hides no other volume of the share.
		klog.Warningf("listing volumes: share %s: %v; left out", e, err)
		return nil, nil
	}
	if err != nil || rec == nil || rec.SharedDir || rec.Filling || s.names.Elsewhere(rec.ExportName, e) {
		return nil, err // a volume still being filled does not exist yet for the CO
	}
	opts := share.Options
	if rec.Options != "" {
		if o, err := mountopts.Parse(rec.Options); err == nil {
			opts = o
		}
	}
	id, err := s.VolumeID(e, rec, opts)
	if err != nil {
		return nil, err
	}
	l := &Listed{ID: id, Record: rec}
	if health {
		if l.Problems, err = a.Figures().Health(rec); err != nil {
			return nil, err
		}
	}
	return l, nil
}

type knownExport struct {
	e    export.Export
	opts mountopts.Options
}

// exports returns every export the state directory has mounted, once
// each, sorted.
func (s lister) exports() []knownExport {
	exps, opts := s.mounts.Known()
	var out []knownExport
	for i, e := range exps {
		if !slices.ContainsFunc(out, func(k knownExport) bool { return k.e.String() == e.String() }) {
			out = append(out, knownExport{e: e, opts: opts[i]})
		}
	}
	slices.SortFunc(out, func(a, b knownExport) int { return strings.Compare(a.e.String(), b.e.String()) })
	return out
}

func encodeToken(exp, key string) string {
	return tokenPrefix + base64.RawURLEncoding.EncodeToString([]byte(exp+"\x00"+key))
}

func decodeToken(t string) (exp, key string, err error) {
	if t == "" {
		return "", "", nil
	}
	b, derr := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(t, tokenPrefix))
	exp, key, ok := strings.Cut(string(b), "\x00")
	if !strings.HasPrefix(t, tokenPrefix) || derr != nil || !ok || exp == "" || key == "" {
		return "", "", fault.New(fault.Aborted, "starting token %q is not one nfsdir handed out; list again from the start", t)
	}
	return exp, key, nil
}

// lister is the room of Set that lists volumes: the known exports, each
// one's records, within the call's bounds.
type lister struct{ *Set }

func (s *Set) lister() lister { return lister{s} }
