package serveragent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"k8s.io/klog/v2"

	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/grpcstatus"
	"github.com/nfsdir/nfsdir/pkg/provision"
	"github.com/nfsdir/nfsdir/pkg/quota"
	"github.com/nfsdir/nfsdir/pkg/treecopy"
)

// Export is one export root the agent serves: the share as NFS clients
// mount it (what StorageClasses name) and the local directory it is.
type Export struct {
	Share string
	Dir   string
}

// Config is an agent's configuration.
type Config struct {
	// Exports are served for quotas and copies: on file systems with
	// project quotas.
	Exports []Export
	// CopyExports are served for copies only (any file system).
	CopyExports []Export
	// Copier makes the copies; its zero value means treecopy.Default.
	Copier treecopy.Copier
	// CopyWorkers bounds the copies made at once (0: 2); more wait.
	CopyWorkers int
	// Projects is the range of project IDs the agent gives volumes,
	// inclusive; IDs outside it are never touched.
	FirstProject, LastProject uint32
	// Audit gets one JSON line per change (and per refusal).
	Audit io.Writer
}

// Agent serves Service.
type Agent struct {
	cfg     Config
	exports map[string]string // share -> local directory
	quotas  map[string]bool   // shares served for quotas (not copies only)
	copies  chan struct{}     // one token per copy being made
	copyMu  sync.Mutex
	running map[string]*treecopy.Progress // copies being made, by copyKey
	mu      sync.Mutex                    // one change at a time: project allocation
	next    uint32
	auditMu sync.Mutex
	areaMu  sync.Mutex
	areas   map[string]*openedArea // by share: the areas MakeVolume and RemoveVolume act on
}

// New checks cfg (every export root is a directory on a file system with
// project quotas) and returns the agent.
func New(cfg Config) (*Agent, error) {
	if len(cfg.Exports)+len(cfg.CopyExports) == 0 {
		return nil, fmt.Errorf("no export roots: give at least one --export share=directory (or --copy-export)")
	}
	if cfg.FirstProject == 0 || cfg.LastProject < cfg.FirstProject {
		return nil, fmt.Errorf("project ID range %d-%d: want 0 < first <= last", cfg.FirstProject, cfg.LastProject)
	}
	if cfg.Copier.MaxOpen == 0 {
		cfg.Copier = treecopy.Default
	}
	if cfg.CopyWorkers <= 0 {
		cfg.CopyWorkers = 2
	}
	a := &Agent{cfg: cfg, exports: map[string]string{}, quotas: map[string]bool{}, next: cfg.FirstProject,
		copies: make(chan struct{}, cfg.CopyWorkers), running: map[string]*treecopy.Progress{}}
	for i, e := range append(append([]Export(nil), cfg.Exports...), cfg.CopyExports...) {
		share := path.Clean("/" + e.Share)
		if !path.IsAbs(e.Dir) {
			return nil, fmt.Errorf("export %s: directory %q is not absolute", share, e.Dir)
		}
		if _, dup := a.exports[share]; dup {
			return nil, fmt.Errorf("export %s is given twice", share)
		}
		if i < len(cfg.Exports) {
			fs, err := quota.Open(e.Dir)
			if err != nil {
				return nil, fmt.Errorf("export %s: %w (for copies only, give it with --copy-export)", share, err)
			}
			fs.Close()
			a.quotas[share] = true
		} else if st, err := os.Stat(e.Dir); err != nil || !st.IsDir() {
			if err == nil {
				err = fmt.Errorf("not a directory")
			}
			return nil, fmt.Errorf("export %s: %s: %w", share, e.Dir, err)
		}
		a.exports[share] = path.Clean(e.Dir)
	}
	return a, nil
}

// view is nfsdir's records of one export root, read-only.
type view struct {
	*provision.View
	root *os.Root
}

func (v view) close() {
	v.View.Close()
	v.root.Close()
}

// view opens the records of share's export root: the agent reads them on
// its side and acts only on what they prove nfsdir's.
// Redact returns msg with the agent's local directories named by their
// shares, as callers know them: the server's own layout stays in its log.
func (a *Agent) Redact(msg string) string {
	type export struct{ share, local string }
	var ex []export
	for share, local := range a.exports {
		if local != "/" {
			ex = append(ex, export{share, local})
		}
	}
	// Longest first: an export inside another is named by its own share.
	slices.SortFunc(ex, func(x, y export) int { return len(y.local) - len(x.local) })
	for _, e := range ex {
		msg = strings.ReplaceAll(msg, e.local, "<share "+e.share+">")
	}
	return msg
}

func (a *Agent) view(share string) (string, view, error) {
	local, ok := a.exports[share]
	if !ok {
		return "", view{}, fault.New(fault.PermissionDenied, "share %q is not one of this agent's export roots", share)
	}
	root, err := os.OpenRoot(local)
	if err != nil {
		return "", view{}, fault.Wrap(fault.Unavailable, err, "export root %s", local)
	}
	v, err := provision.OpenView(root)
	if err != nil {
		root.Close()
	}
	if errors.Is(err, provision.ErrNoArea) {
		return "", view{}, fault.New(fault.NotFound, "share %q holds no nfsdir volumes", share)
	}
	if errors.Is(err, os.ErrPermission) {
		return "", view{}, fault.New(fault.PermissionDenied, "the agent may not read nfsdir's records in %s/.nfsdir (closed to all but their owner): run it as root or with CAP_DAC_READ_SEARCH", local)
	}
	if err != nil {
		return "", view{}, err
	}
	return local, view{v, root}, nil
}

// volume is one volume's directory, opened and proven nfsdir's.
type volume struct {
	dir *os.File
	fs  *quota.FS
	rec *provision.Record
}

func (v *volume) close() {
	v.dir.Close()
	v.fs.Close()
}

// open finds v's directory below its export root, by nfsdir's record, not
// following any symlink.
func (a *Agent) open(v *Volume) (*volume, error) {
	share := path.Clean("/" + v.Share)
	if _, ok := a.exports[share]; ok && !a.quotas[share] {
		return nil, fault.New(fault.FailedPrecondition, "share %q is served by this agent for copies only (--copy-export): for quotas, serve it with --export, on a file system with project quotas", v.Share)
	}
	local, view, err := a.view(share)
	if err != nil {
		return nil, err
	}
	defer view.close()
	dir, rec, err := view.OpenVolumeDir(v.SubDir, v.Token)
	if err != nil {
		return nil, err
	}
	fs, err := quota.Open(local)
	if err != nil {
		dir.Close()
		return nil, fault.Wrap(fault.FailedPrecondition, err, "export root %s", local)
	}
	return &volume{dir, fs, rec}, nil
}

func (a *Agent) inRange(id uint32) bool { return id >= a.cfg.FirstProject && id <= a.cfg.LastProject }

// project returns the volume's project, giving it a free one of the
// agent's range the first time. A project is free when nothing uses it
// and it has no limits: the file system, not a table of the agent's, is
// the truth, so a restart or a lost state loses nothing.
func (a *Agent) project(v *volume) (uint32, error) {
	id, inherit, err := quota.Project(v.dir)
	if err != nil {
		return 0, err
	}
	if id != 0 {
		if !a.inRange(id) {
			return 0, fault.New(fault.FailedPrecondition, "directory %q has project %d, outside this agent's range %d-%d: set by someone else, left alone", v.rec.SubDir, id, a.cfg.FirstProject, a.cfg.LastProject)
		}
		if !inherit {
			if err := quota.SetProject(v.dir, id); err != nil {
				return 0, err
			}
		}
		return id, nil
	}
	span := a.cfg.LastProject - a.cfg.FirstProject + 1
	for i := uint32(0); i < span; i++ {
		n := a.cfg.FirstProject + (a.next-a.cfg.FirstProject+i)%span
		u, err := v.fs.Get(n)
		if err != nil {
			return 0, err
		}
		if u.Inodes != 0 || u.Bytes != 0 || u.Limits != (quota.Limits{}) {
			continue
		}
		if err := quota.SetProject(v.dir, n); err != nil {
			return 0, err
		}
		a.next = n + 1
		return n, nil
	}
	return 0, fault.New(fault.ResourceExhausted, "every project ID of the range %d-%d is in use", a.cfg.FirstProject, a.cfg.LastProject)
}

// Set implements Service.
func (a *Agent) Set(ctx context.Context, req *SetRequest) (*Usage, error) {
	u, err := a.set(req)
	a.audit(ctx, "set", &req.Volume, map[string]any{"bytes": req.Bytes, "inodes": req.Inodes}, u, err)
	return u, grpcstatus.Of(err)
}

func (a *Agent) set(req *SetRequest) (*Usage, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	v, err := a.open(&req.Volume)
	if err != nil {
		return nil, err
	}
	defer v.close()
	id, err := a.project(v)
	if err != nil {
		return nil, err
	}
	if err := v.fs.SetLimits(id, quota.Limits{Bytes: req.Bytes, Inodes: req.Inodes}); err != nil {
		return nil, err
	}
	return usage(v.fs, id)
}

// Clear implements Service.
func (a *Agent) Clear(ctx context.Context, req *Volume) (*Empty, error) {
	err := a.clear(req)
	a.audit(ctx, "clear", req, nil, nil, err)
	return &Empty{}, grpcstatus.Of(err)
}

func (a *Agent) clear(req *Volume) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	v, err := a.open(req)
	if fault.Is(err, fault.NotFound) {
		return nil // the volume is gone: nothing of it to clear
	}
	if err != nil {
		return err
	}
	defer v.close()
	id, _, err := quota.Project(v.dir)
	if err != nil || id == 0 {
		return err
	}
	if !a.inRange(id) {
		return fault.New(fault.FailedPrecondition, "directory %q has project %d, outside this agent's range: left alone", v.rec.SubDir, id)
	}
	if err := v.fs.SetLimits(id, quota.Limits{}); err != nil {
		return err
	}
	return quota.ClearProject(v.dir)
}

// Get implements Service.
func (a *Agent) Get(ctx context.Context, req *Volume) (*Usage, error) {
	v, err := a.open(req)
	if err != nil {
		return nil, grpcstatus.Of(err)
	}
	defer v.close()
	id, _, err := quota.Project(v.dir)
	if err != nil {
		return nil, grpcstatus.Of(err)
	}
	if id == 0 {
		return &Usage{}, nil
	}
	u, err := usage(v.fs, id)
	return u, grpcstatus.Of(err)
}

// Copy implements Service: it copies a tree of the share on the server,
// into an empty directory, with the copy engine (reflinks where the file
// system has them, else copy_file_range), while the caller waits; the
// caller going away stops it. Both directories must be nfsdir's
// (provision.View.OpenCopy), still the ones the controller opened, and
// the records must say to copy the one into the other.
func (a *Agent) Copy(ctx context.Context, req *provision.RemoteCopy) (*treecopy.Result, error) {
	res, err := a.copy(ctx, req)
	a.audit(ctx, "copy", &Volume{Share: req.Share, SubDir: req.Dst.String()}, map[string]any{"src": req.Src.String(),
		"files": res.Files, "bytes": res.Bytes, "tookMs": res.Took.Milliseconds()}, nil, err)
	return res, grpcstatus.Of(err)
}

func (a *Agent) copy(ctx context.Context, req *provision.RemoteCopy) (*treecopy.Result, error) {
	res := &treecopy.Result{}
	share := path.Clean("/" + req.Share)
	if _, ok := a.exports[share]; !ok {
		// Said before anything is written: the controller copies instead.
		return res, fault.New(fault.Unimplemented, "this agent does not copy on share %q: not one of its export roots (--export, --copy-export)", req.Share)
	}
	// A worker first: copies waiting for one hold no descriptor.
	select {
	case a.copies <- struct{}{}:
		defer func() { <-a.copies }()
	case <-ctx.Done():
		return res, fault.Wrap(fault.Unavailable, ctx.Err(), "waiting for a copy worker")
	}
	_, v, err := a.view(share)
	if err != nil {
		return res, err
	}
	defer v.close()
	src, dst, err := v.OpenCopy(*req)
	if err != nil {
		return res, err
	}
	defer src.Close()
	defer dst.Close()
	p := &treecopy.Progress{}
	key := copyKey(req)
	a.copyMu.Lock()
	if a.running[key] != nil {
		a.copyMu.Unlock()
		return res, fault.New(fault.Aborted, "a copy into %s is being made already", req.Dst)
	}
	a.running[key] = p
	a.copyMu.Unlock()
	defer func() {
		a.copyMu.Lock()
		delete(a.running, key)
		a.copyMu.Unlock()
	}()
	c := a.cfg.Copier
	c.Progress = p
	*res, err = c.Copy(ctx, int(src.Fd()), int(dst.Fd()), req.RootAttrs)
	return res, err
}

// copyKey names a copy by its destination.
func copyKey(req *provision.RemoteCopy) string {
	return fmt.Sprintf("%s\x00%s\x00%d", path.Clean("/"+req.Share), req.Dst, req.Dst.FileID)
}

// CopyProgress implements Service.
func (a *Agent) CopyProgress(_ context.Context, req *provision.RemoteCopy) (*CopyProgress, error) {
	a.copyMu.Lock()
	defer a.copyMu.Unlock()
	p := a.running[copyKey(req)]
	if p == nil {
		return &CopyProgress{}, nil
	}
	return &CopyProgress{Running: true, Entries: p.Entries.Load(), Bytes: p.Bytes.Load()}, nil
}

// Probe implements Service.
func (a *Agent) Probe(context.Context, *Empty) (*Empty, error) { return &Empty{}, nil }

func usage(fs *quota.FS, id uint32) (*Usage, error) {
	u, err := fs.Get(id)
	if err != nil {
		return nil, err
	}
	return &Usage{Project: id, Bytes: u.Bytes, Inodes: u.Inodes, LimitBytes: u.Limits.Bytes, LimitInodes: u.Limits.Inodes}, nil
}

// audit writes one line about a change: who asked (the client
// certificate's subject), what, and how it ended.
func (a *Agent) audit(ctx context.Context, op string, v *Volume, args map[string]any, u *Usage, err error) {
	entry := map[string]any{"time": time.Now().UTC().Format(time.RFC3339Nano), "op": op,
		"share": v.Share, "subDir": v.SubDir, "client": clientOf(ctx)}
	for k, x := range args {
		entry[k] = x
	}
	if u != nil {
		entry["project"] = u.Project
	}
	if err != nil {
		entry["error"] = err.Error()
		entry["code"] = fault.KindOf(err).String()
	}
	b, _ := json.Marshal(entry)
	klog.Infof("audit: %s", b)
	if a.cfg.Audit != nil {
		a.auditMu.Lock()
		a.cfg.Audit.Write(append(b, '\n'))
		a.auditMu.Unlock()
	}
}

// clientOf names the caller by its verified certificate.
func clientOf(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return ""
	}
	if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.VerifiedChains) > 0 {
		return ti.State.VerifiedChains[0][0].Subject.String()
	}
	return p.Addr.String()
}
