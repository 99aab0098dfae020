package csiserver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"k8s.io/klog/v2"

	"github.com/nfsdir/nfsdir/pkg/export"
	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/mountopts"
	"github.com/nfsdir/nfsdir/pkg/params"
	"github.com/nfsdir/nfsdir/pkg/placement"
	"github.com/nfsdir/nfsdir/pkg/provision"
	"github.com/nfsdir/nfsdir/pkg/shares"
	"github.com/nfsdir/nfsdir/pkg/volumeid"
)

// memberWait bounds the reading of one export of a class while a volume
// is placed; memberRest is how long an export that did not answer is
// skipped before it is read again.
var (
	memberWait = 8 * time.Second
	memberRest = 30 * time.Second
)

// maxPlacements bounds the placements remembered for creations not done.
const maxPlacements = 4096

// maxMemberReads bounds the reads of one export in flight: a read stuck
// in the kernel on a server that died cannot be stopped, so at most this
// many goroutines wait on one export whatever the call rate; a placement
// that finds them all taken waits at most memberWait, then passes the
// export over.
const maxMemberReads = 8

// placements remembers, for the creations not finished yet, the export
// each was placed on, so that a retry goes back there even when that
// export does not answer now (its directory may be half made); and which
// exports did not answer lately.
type placements struct {
	mu      sync.Mutex
	placed  map[string]string               // volume name -> export name
	resting map[export.Export]rest          // exports that did not answer lately
	reading map[export.Export]chan struct{} // slots of the reads in flight, by export
}

// slots returns the slots of e's reads.
func (p *placements) slots(e export.Export) chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reading == nil {
		p.reading = map[export.Export]chan struct{}{}
	}
	ch := p.reading[e]
	if ch == nil {
		ch = make(chan struct{}, maxMemberReads)
		p.reading[e] = ch
	}
	return ch
}

func (p *placements) earlier(volume string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	name, ok := p.placed[volume]
	return name, ok
}

func (p *placements) remember(volume, name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.placed == nil || len(p.placed) >= maxPlacements {
		p.placed = map[string]string{} // creations given up long ago
	}
	p.placed[volume] = name
}

func (p *placements) done(volume string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.placed, volume)
}

// rest is an export left unread until a time, and why.
type rest struct {
	until time.Time
	err   error
}

// rests returns why e is left unread now; nil: it is read.
func (p *placements) rests(e export.Export) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r, ok := p.resting[e]; ok && time.Now().Before(r.until) {
		return r.err
	}
	return nil
}

// rest leaves e unread for memberRest after an error; nil: e answered.
func (p *placements) rest(e export.Export, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err == nil {
		delete(p.resting, e)
		return
	}
	if p.resting == nil {
		p.resting = map[export.Export]rest{}
	}
	p.resting[e] = rest{time.Now().Add(memberRest), err}
}

// placer places new volumes on the exports of their classes.
type placer struct {
	shares *shares.Set
	names  export.Names // where each named export is now
	memo   placements
	// read reads one member (readShare, unless a test says otherwise).
	read func(ctx context.Context, m member, key string, opts mountopts.Options) (memberState, error)
}

// memberState is what a read of a member found: the name of the volume
// it holds at the key asked for ("": none) and its file system's space.
type memberState struct {
	holds       string
	used, avail int64
}

// member is one export a class may place a volume on.
type member struct {
	name string // "" for a class of server and share
	at   export.Export
}

// members resolves the exports a class names.
func (s *placer) members(cp params.Create) ([]member, error) {
	if len(cp.Placement.Pool) == 0 {
		return []member{{at: cp.Export}}, nil
	}
	var out []member
	for _, name := range cp.Placement.Pool {
		e, ok := s.names.Lookup(name)
		if !ok {
			return nil, fault.New(fault.InvalidArgument, "the StorageClass names export %q, which the driver's configuration does not name (it names %s): add it to the chart value exports (flag --export)", name, s.names.List())
		}
		out = append(out, member{name: name, at: e})
	}
	return out, nil
}

// place decides the export a new volume goes on (cp.Export and
// cp.ExportName, and the request's ExportName) and the volume's content
// source there. A class of one export without limits has nothing to
// choose; otherwise placement.Choose picks from what each export holds
// and has room for. A clone or restore goes on its source's export, the
// only one it can be copied on.
func (s *placer) place(ctx context.Context, cs *csi.VolumeContentSource, cp *params.Create, preq *provision.Request, opts mountopts.Options) (err error) {
	members, err := s.members(*cp)
	if err != nil {
		return err
	}
	if err := sameAgentServer(members, *cp); err != nil {
		return err
	}
	chosen := members[0]
	if cp.Placement.Chooses() {
		if members, err = s.forSource(cs, members); err != nil {
			return err
		}
		if chosen, err = s.choose(ctx, members, *cp, *preq, opts); err != nil {
			return err
		}
	}
	cp.Export, cp.ExportName, preq.ExportName = chosen.at, chosen.name, chosen.name
	preq.Source, err = contentSource(cs, cp.Export, s.names)
	return err
}

// forSource narrows a pool to the export of a clone's or restore's
// source.
func (s *placer) forSource(cs *csi.VolumeContentSource, members []member) ([]member, error) {
	id, ok := contentSourceID(cs)
	if !ok {
		return members, nil
	}
	if locate(s.names, &id) != nil {
		return members, nil // contentSource says why
	}
	for _, m := range members {
		if m.name == id.Name && m.at == id.Export {
			return []member{m}, nil
		}
	}
	return nil, fault.New(fault.InvalidArgument, "the source is on %s, which is not one of the StorageClass's exports: nfsdir copies a volume within one export; use a class that names it", id.Export)
}

// contentSourceID is the ID of a content source nfsdir made, if it is one.
func contentSourceID(cs *csi.VolumeContentSource) (volumeid.ID, bool) {
	var id volumeid.ID
	var err error
	switch {
	case cs.GetSnapshot() != nil:
		id, err = volumeid.ParseSnapshot(cs.GetSnapshot().GetSnapshotId())
	case cs.GetVolume() != nil:
		id, err = volumeid.Parse(cs.GetVolume().GetVolumeId())
	default:
		return id, false
	}
	return id, err == nil
}

// choose reads the members at once, each for memberWait at most, and
// picks one: where an earlier attempt of this creation was placed, or
// what placement.Choose says.
func (s *placer) choose(ctx context.Context, members []member, cp params.Create, preq provision.Request, opts mountopts.Options) (member, error) {
	if name, ok := s.memo.earlier(preq.Name); ok {
		for _, m := range members {
			if m.name == name {
				return m, nil
			}
		}
	}
	key := (&provision.Record{Name: preq.Name, SubDir: preq.SubDir, Shared: preq.Shared}).Key()
	found := s.readMembers(ctx, members, key, cp.Placement, opts)
	i, err := placement.Choose(found, placement.Policy{FillPercent: cp.Placement.FillPercent}, preq.Name)
	var ex *placement.Exhausted
	switch {
	case errors.As(err, &ex):
		return member{}, fault.New(fault.ResourceExhausted, "%v", err)
	case err != nil:
		return member{}, fault.New(fault.FailedPrecondition, "volume %q: %v", preq.Name, err)
	}
	chosen := members[i]
	s.memo.remember(preq.Name, chosen.name)
	if len(members) > 1 {
		klog.Infof("volume %q placed on export %s (%d%% full, %d bytes available)", preq.Name, chosen.name, found[i].Percent(), found[i].AvailableBytes)
	}
	return chosen, nil
}

// readMembers reads the members at once; key ("": none) is the record
// each is asked for.
func (s *placer) readMembers(ctx context.Context, members []member, key string, pl params.Placement, opts mountopts.Options) []placement.Member {
	found := make([]placement.Member, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		found[i] = placement.Member{Name: m.name, Drained: slices.Contains(pl.Drain, m.name)}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.readMember(ctx, m, key, opts, &found[i])
		}()
	}
	wg.Wait()
	return found
}

// readMember fills in what the member holds at the volume's key and its
// file system's space; an export that does not answer in memberWait, or
// did not lately, is left with the error.
func (s *placer) readMember(ctx context.Context, m member, key string, opts mountopts.Options, into *placement.Member) {
	if err := s.memo.rests(m.at); err != nil {
		into.Err = fmt.Errorf("%w (read again within %s)", err, memberRest)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, memberWait)
	defer cancel()
	slots := s.memo.slots(m.at)
	select {
	case slots <- struct{}{}:
	case <-ctx.Done():
		err := fault.New(fault.Unavailable, "%s: its last %d reads have not answered", m.at, maxMemberReads)
		s.memo.rest(m.at, err)
		into.Err = err
		return
	}
	read := s.read
	if read == nil {
		read = s.readShare
	}
	type result struct {
		st  memberState
		err error
	}
	done := make(chan result, 1)
	go func() {
		defer func() { <-slots }()
		st, err := read(ctx, m, key, opts)
		done <- result{st, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		r.err = fault.New(fault.Unavailable, "%s did not answer in %s", m.at, memberWait)
	}
	s.memo.rest(m.at, r.err)
	if r.err != nil {
		into.Err = r.err
		return
	}
	into.Holds, into.UsedBytes, into.AvailableBytes = r.st.holds, r.st.used, r.st.avail
}

// readShare reads a member through the controller's mount of it: statfs,
// then the record at key ("": none).
func (s *placer) readShare(ctx context.Context, m member, key string, opts mountopts.Options) (memberState, error) {
	var st memberState
	sh, err := s.shares.Mount(ctx, m.at, opts)
	if err != nil {
		return st, err
	}
	u, err := s.shares.Usage(ctx, sh)
	if err != nil || key == "" {
		return memberState{used: u.UsedBytes, avail: u.AvailableBytes}, err
	}
	st.used, st.avail = u.UsedBytes, u.AvailableBytes
	err = s.shares.On(ctx, m.at, opts, false, func(a *provision.Area, _ *shares.Share) error {
		rec, err := a.Inventory().Record(key)
		if rec != nil {
			st.holds = rec.Name
		}
		return err
	})
	if errors.Is(err, provision.ErrNoArea) {
		err = nil
	}
	return st, err
}

// sameAgentServer refuses a quota or copy agent for a class whose
// exports are on more than one server: an agent serves the shares of the
// server it runs on.
func sameAgentServer(members []member, cp params.Create) error {
	if cp.QuotaAgent == "" && cp.CopyAgent == "" {
		return nil
	}
	for _, m := range members[1:] {
		if m.at.Server != members[0].at.Server {
			return fault.New(fault.InvalidArgument, "the StorageClass's exports are on servers %s and %s, and its quotaAgent or copyAgent runs on one server: use a class per server", members[0].at.Server, m.at.Server)
		}
	}
	return nil
}
