package provision

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/nfsproto"
	"github.com/nfsdir/nfsdir/pkg/params"
	"github.com/nfsdir/nfsdir/pkg/volumeid"
)

// fakeCompounder answers every COMPOUND with err, and counts them.
type fakeCompounder struct {
	err   error
	calls int
}

func (f *fakeCompounder) Do(_ context.Context, ops ...nfsproto.Op) error {
	f.calls++
	return f.err
}

// withCompounds has a use c for the volumes it makes (on a local file
// system there is no NFS handle for UseCompounds to read).
func withCompounds(a *Area, c Compounder) {
	a.compounds = &compounds{c: c, rootFH: []byte("."), volumeFH: []byte(volumesDir), trashFH: []byte(trashDir)}
}

// TestCreateGoesThroughTheMountWhenTheSessionMadeNothing: a COMPOUND that
// did not reach the server, or stopped at the record, made nothing, and
// the volume is made through the mount as before; a server that refuses
// the session is asked no more.
func TestCreateGoesThroughTheMountWhenTheSessionMadeNothing(t *testing.T) {
	for name, err := range map[string]error{
		"not sent":       fmt.Errorf("%w: connection refused", nfsproto.ErrNotSent),
		"refused":        fmt.Errorf("%w: %w: authentication error 5", nfsproto.ErrNotSent, nfsproto.ErrRPC),
		"record exists":  &nfsproto.OpError{Index: 1, Op: "CREATE", Status: nfsproto.ErrExist},
		"records stale":  &nfsproto.OpError{Index: 0, Op: "PUTFH", Status: nfsproto.ErrStale},
		"server delayed": &nfsproto.OpError{Index: 1, Op: "CREATE", Status: nfsproto.ErrDelay},
	} {
		t.Run(name, func(t *testing.T) {
			dir, a := newShare(t)
			f := &fakeCompounder{err: err}
			withCompounds(a, f)
			for i := range 2 {
				rec, err := a.Create(context.Background(), req(fmt.Sprint("pvc-", i), fmt.Sprint("pvc-", i), params.Delete))
				fatalIf(t, err)
				if st, err := os.Stat(filepath.Join(dir, rec.SubDir)); err != nil || rec.FileID == 0 || st.Mode().Perm() != 0o770 {
					t.Errorf("volume %d: %v, record %+v", i, err, rec)
				}
			}
			creates := f.calls
			// DeleteVolume: the look-ups fail, and the mount's path
			// deletes.
			for i := range 2 {
				id := volumeid.ID{Key: volumeid.KeyForDir(fmt.Sprint("pvc-", i))}
				rec, _ := readRecord(a.records(), id.Key)
				id.Token = rec.Token
				if _, err := a.Delete(context.Background(), id); err != nil {
					t.Fatal(err)
				}
				if _, err := os.Lstat(filepath.Join(dir, fmt.Sprint("pvc-", i))); err == nil {
					t.Errorf("volume %d stays", i)
				}
			}
			if want := 2; errors.Is(err, nfsproto.ErrRPC) {
				if f.calls != 1 {
					t.Errorf("%d COMPOUNDs to a server that refused the session, want 1", f.calls)
				}
			} else if creates != want {
				t.Errorf("%d COMPOUNDs of CreateVolume, want %d", creates, want)
			}
		})
	}
}

// TestCreateThroughTheSessionOnlyForWhatItMakes: shared and owned
// volumes go through the mount.
func TestCreateThroughTheSessionOnlyForWhatItMakes(t *testing.T) {
	_, a := newShare(t)
	f := &fakeCompounder{err: errors.New("must not be called")}
	withCompounds(a, f)
	owned := req("pvc-owned", "pvc-owned", params.Delete)
	owned.UID = os.Getuid()
	shared := req("pvc-shared", "shared", params.Retain)
	shared.Shared = true
	for _, r := range []Request{owned, shared} {
		if _, err := a.Create(context.Background(), r); err != nil {
			t.Errorf("%s: %v", r.Name, err)
		}
	}
	if f.calls != 0 {
		t.Errorf("%d COMPOUNDs for volumes the session does not make", f.calls)
	}
}

// TestCreateWhoseCompoundAnswerWasLostIsUnavailable: when the reply to
// the first COMPOUND is lost, whatever it made stays, and the call is
// Unavailable: a retry finishes through the mount.
func TestCreateWhoseCompoundAnswerWasLostIsUnavailable(t *testing.T) {
	_, a := newShare(t)
	withCompounds(a, &fakeCompounder{err: errors.New("no reply from the NFS server in time")})
	_, err := a.Create(context.Background(), req("pvc-lost", "pvc-lost", params.Delete))
	if !fault.Is(err, fault.Unavailable) {
		t.Errorf("Create: %v, want Unavailable", err)
	}
}

// localServer plays the server for a share at dir on a local file
// system, with filehandles that are paths below dir (withCompounds gives
// the share root "." and the records directory its path): it runs PUTFH,
// SAVEFH, LOOKUP (never following a symlink), CREATE, GETFH, GETATTR,
// RENAME and SETATTR of the mode, and stops at the first failure. The
// seal's link made, it answers seal instead of going on, when seal is
// set.
type localServer struct {
	dir   string
	seal  error
	mu    sync.Mutex
	calls int
}

func (s *localServer) Do(_ context.Context, ops ...nfsproto.Op) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	var cur, saved string
	fail := func(i int, st nfsproto.Status) error {
		return &nfsproto.OpError{Index: i, Op: fmt.Sprintf("%T", ops[i]), Status: st}
	}
	status := func(err error) nfsproto.Status {
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nfsproto.ErrNoEnt
		case errors.Is(err, fs.ErrExist):
			return nfsproto.ErrExist
		case errors.Is(err, syscall.ENOTDIR):
			return nfsproto.ErrNotDir
		}
		return nfsproto.ErrIO
	}
	for i, op := range ops {
		at := filepath.Join(s.dir, cur)
		if _, ok := op.(*nfsproto.Lookup); ok {
			if st, err := os.Lstat(at); err == nil && st.Mode()&fs.ModeSymlink != 0 {
				return fail(i, nfsproto.ErrSymlink)
			} else if err == nil && !st.IsDir() {
				return fail(i, nfsproto.ErrNotDir)
			}
		}
		switch o := op.(type) {
		case *nfsproto.PutFH:
			cur = string(o.FH)
		case *nfsproto.SaveFH:
			saved = cur
		case *nfsproto.Lookup:
			if _, err := os.Lstat(filepath.Join(at, o.Name)); err != nil {
				return fail(i, status(err))
			}
			cur = filepath.Join(cur, o.Name)
		case *nfsproto.Create:
			if o.Type == nfsproto.TypeLink {
				if err := os.Symlink(o.Link, filepath.Join(at, o.Name)); err != nil {
					return fail(i, status(err))
				}
				if strings.HasSuffix(o.Name, sealSuffix) && s.seal != nil {
					return s.seal
				}
				continue
			}
			if err := os.Mkdir(filepath.Join(at, o.Name), os.FileMode(*o.Mode)); err != nil {
				return fail(i, status(err))
			}
			cur = filepath.Join(cur, o.Name)
		case *nfsproto.GetFH:
			o.FH = []byte(cur)
		case *nfsproto.GetAttr:
			st, err := os.Lstat(at)
			if err != nil {
				return fail(i, status(err))
			}
			o.Type, o.FileID = nfsproto.TypeRegular, st.Sys().(*syscall.Stat_t).Ino
			switch {
			case st.IsDir():
				o.Type = nfsproto.TypeDir
			case st.Mode()&fs.ModeSymlink != 0:
				o.Type = nfsproto.TypeLink
			}
		case *nfsproto.Rename:
			if err := os.Rename(filepath.Join(s.dir, saved, o.Old), filepath.Join(at, o.New)); err != nil {
				return fail(i, status(err))
			}
		case *nfsproto.ReadLink:
			l, err := os.Readlink(at)
			if err != nil {
				return fail(i, status(err))
			}
			o.Link = l
		case *nfsproto.Verify:
			// By type and fileid: a stand-in's filehandles are paths.
			st, err := os.Lstat(at)
			if err != nil {
				return fail(i, status(err))
			}
			if isDir := st.IsDir(); isDir != (o.Type == nfsproto.TypeDir) || st.Sys().(*syscall.Stat_t).Ino != o.FileID {
				return fail(i, nfsproto.ErrNotSame)
			}
		case *nfsproto.Remove:
			if err := os.Remove(filepath.Join(at, o.Target)); err != nil {
				if errors.Is(err, syscall.ENOTEMPTY) {
					return fail(i, nfsproto.ErrNotEmpty)
				}
				return fail(i, status(err))
			}
		case *nfsproto.SetMode:
			if err := os.Chmod(at, modeBits(o.Mode)); err != nil {
				return fail(i, status(err))
			}
		default:
			return fmt.Errorf("localServer runs no %T", op)
		}
	}
	return nil
}

// TestSealThroughTheMountWhenTheServerRefusesTheRename: the seal's rename
// refused (the server's grace period after a restart), or the session
// lost before the seal, the seal goes through the mount, over the link the
// refused COMPOUND left, and the volume is sealed with the handle the
// session read, and given its mode.
func TestSealThroughTheMountWhenTheServerRefusesTheRename(t *testing.T) {
	for name, seal := range map[string]error{
		"":        nil,
		"grace":   &nfsproto.OpError{Index: 4, Op: "RENAME", Status: nfsproto.ErrGrace},
		"no link": fmt.Errorf("%w: connection reset", nfsproto.ErrNotSent),
	} {
		t.Run(name, func(t *testing.T) {
			dir, a := newShare(t)
			srv := &localServer{dir: dir, seal: seal}
			withCompounds(a, srv)
			rec, err := a.Create(context.Background(), req("pvc-seal", "pvc-seal", params.Delete))
			fatalIf(t, err)
			st, err := os.Stat(filepath.Join(dir, "pvc-seal"))
			fatalIf(t, err)
			typ, h := nfsproto.KernelHandleOf([]byte("pvc-seal"), rec.FileID, nfsproto.ModeDir)
			if rec.FileID != st.Sys().(*syscall.Stat_t).Ino || rec.Handle != digestOf(unix.NewFileHandle(typ, h)) {
				t.Errorf("record %+v for the directory of inode %d", rec, st.Sys().(*syscall.Stat_t).Ino)
			}
			if st.Mode()&(os.ModePerm|os.ModeSetgid) != 0o770|os.ModeSetgid {
				t.Errorf("mode %v, want 02770", st.Mode())
			}
			onShare, err := readRecord(a.records(), rec.Key())
			if err != nil || onShare == nil || onShare.FileID != rec.FileID || onShare.Handle != rec.Handle {
				t.Errorf("the record on the share: %+v, %v", onShare, err)
			}
			if _, err := os.Lstat(filepath.Join(dir, volumesDir, rec.Key()+sealSuffix)); err == nil {
				t.Error("the seal's link stays aside")
			}
		})
	}
}

// TestCreateThroughTheSessionUndoesWhatAConcurrentCheckRefuses: the check
// for a shared directory's record, sent with the first COMPOUND, finds
// one: the volume's record and directory the COMPOUND made are undone,
// and the call is AlreadyExists, as when the check goes first.
func TestCreateThroughTheSessionUndoesWhatAConcurrentCheckRefuses(t *testing.T) {
	dir, a := newShare(t)
	withCompounds(a, &localServer{dir: dir})
	shared := &Record{Version: RecordVersion, SharedDir: true, Token: "aaaaaaaa", SubDir: "lonely", OnDelete: params.Retain, Mode: 0o770, UID: -1, GID: -1}
	fatalIf(t, writeRecordExclusive(a.records(), shared.Key(), shared)) // its creation cut before its directory
	_, err := a.Create(context.Background(), req("pvc-lonely", "lonely", params.Delete))
	if !fault.Is(err, fault.AlreadyExists) {
		t.Errorf("Create: %v, want AlreadyExists", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "lonely")); err == nil {
		t.Error("the directory the COMPOUND made stays")
	}
	if rec, _ := readRecord(a.records(), volumeid.KeyForDir("lonely")); rec != nil {
		t.Errorf("the record the COMPOUND made stays: %+v", rec)
	}
}

// recordingServer is a localServer that keeps the operations of each
// COMPOUND it was sent.
type recordingServer struct {
	localServer
	sent [][]nfsproto.Op
}

func (s *recordingServer) Do(ctx context.Context, ops ...nfsproto.Op) error {
	s.sent = append(s.sent, ops)
	return s.localServer.Do(ctx, ops...)
}

// TestCreateThroughTheSessionInTwoCompounds: at the top of the share, a
// volume is made in two COMPOUNDs, the check for a shared directory's
// record at its path the last operation of the first (after the record
// and the directory, since a look-up that finds nothing ends a
// COMPOUND), and nothing else goes to the server.
func TestCreateThroughTheSessionInTwoCompounds(t *testing.T) {
	dir, a := newShare(t)
	srv := &recordingServer{localServer: localServer{dir: dir}}
	withCompounds(a, srv)
	rec, err := a.Create(context.Background(), req("pvc-top", "pvc-top", params.Delete))
	fatalIf(t, err)
	if rec.FileID == 0 {
		t.Errorf("record %+v not sealed", rec)
	}
	if len(srv.sent) != 2 {
		t.Fatalf("%d COMPOUNDs, want 2", len(srv.sent))
	}
	first := srv.sent[0]
	if l, ok := first[len(first)-1].(*nfsproto.Lookup); !ok || l.Name != volumeid.KeyForSharedDir("pvc-top") {
		t.Errorf("the first COMPOUND ends with %#v, want the look-up of %s", first[len(first)-1], volumeid.KeyForSharedDir("pvc-top"))
	}
	if p, ok := first[len(first)-2].(*nfsproto.PutFH); !ok || string(p.FH) != volumesDir {
		t.Errorf("the check looks in %#v, want the records directory", first[len(first)-2])
	}
}

// delayedCheck is a localServer whose look-up of a shared directory's
// record in Create's first COMPOUND answers NFS4ERR_DELAY instead of
// finding nothing.
type delayedCheck struct{ localServer }

func (s *delayedCheck) Do(ctx context.Context, ops ...nfsproto.Op) error {
	err := s.localServer.Do(ctx, ops...)
	if absentAt(err, kindCheckAt) {
		return &nfsproto.OpError{Index: kindCheckAt, Op: "LOOKUP", Status: nfsproto.ErrDelay}
	}
	return err
}

// TestCreateThroughTheSessionUndoneWhenItsCheckGetsNoAnswer: the check in
// the first COMPOUND cannot tell whether a shared directory's record is at
// the path: what the COMPOUND made is undone, and the mount's path makes
// the volume from nothing, its own checks first.
func TestCreateThroughTheSessionUndoneWhenItsCheckGetsNoAnswer(t *testing.T) {
	dir, a := newShare(t)
	withCompounds(a, &delayedCheck{localServer{dir: dir}})
	rec, err := a.Create(context.Background(), req("pvc-delayed", "pvc-delayed", params.Delete))
	fatalIf(t, err)
	st, err := os.Lstat(filepath.Join(dir, "pvc-delayed"))
	fatalIf(t, err)
	if rec.FileID != st.Sys().(*syscall.Stat_t).Ino || st.Mode().Perm() != 0o770 {
		t.Errorf("record %+v for the directory of inode %d, mode %v", rec, st.Sys().(*syscall.Stat_t).Ino, st.Mode())
	}
	ents, err := os.ReadDir(filepath.Join(dir, volumesDir))
	fatalIf(t, err)
	if len(ents) != 1 || ents[0].Name() != rec.Key() {
		t.Errorf("records %v, want only %s", ents, rec.Key())
	}
}

// TestNestedCreateThroughTheSession: below an existing parent, the checks
// go first, one COMPOUND each and all at once (the parent walked to and
// found a directory with no share's metadata in it, no record of a volume
// or shared directory at it), then the record and the directory in the
// parent by its filehandle with the look-up of a shared directory's record
// at the path, then the seal with the nesting look-ups again: 7 COMPOUNDs
// in 3 round trips, and nothing through the mount's path but its look-up
// of the usage figure.
func TestNestedCreateThroughTheSession(t *testing.T) {
	dir, a := newShare(t)
	srv := &localServer{dir: dir}
	withCompounds(a, srv)
	fatalIf(t, os.Mkdir(filepath.Join(dir, "team"), 0o755))
	rec, err := a.Create(context.Background(), req("pvc-a", "team/pvc-a", params.Delete))
	fatalIf(t, err)
	st, err := os.Lstat(filepath.Join(dir, "team/pvc-a"))
	fatalIf(t, err)
	typ, h := nfsproto.KernelHandleOf([]byte("team/pvc-a"), rec.FileID, nfsproto.ModeDir)
	if rec.FileID != st.Sys().(*syscall.Stat_t).Ino || rec.Handle != digestOf(unix.NewFileHandle(typ, h)) {
		t.Errorf("record %+v for the directory of inode %d", rec, st.Sys().(*syscall.Stat_t).Ino)
	}
	if st.Mode()&(os.ModePerm|os.ModeSetgid) != 0o770|os.ModeSetgid {
		t.Errorf("mode %v, want 02770", st.Mode())
	}
	if onShare, err := readRecord(a.records(), rec.Key()); err != nil || onShare == nil || onShare.Handle != rec.Handle {
		t.Errorf("the record on the share: %+v, %v", onShare, err)
	}
	if srv.calls != 7 {
		t.Errorf("%d COMPOUNDs for a volume one level down, want 7", srv.calls)
	}
	// Two levels down: one more walk and two more records to look for,
	// before and after.
	fatalIf(t, os.MkdirAll(filepath.Join(dir, "a/b"), 0o755))
	srv.calls = 0
	_, err = a.Create(context.Background(), req("pvc-b", "a/b/pvc-b", params.Delete))
	fatalIf(t, err)
	if srv.calls != 12 {
		t.Errorf("%d COMPOUNDs for a volume two levels down, want 12", srv.calls)
	}
}

// TestNestedCreateThroughTheSessionNeverActsWhereTheMountWouldNot: a
// parent that is a volume's or a shared directory, another share's root,
// a symlink, a file, or missing: the session makes nothing, and the
// mount's path answers as it does with no session (or makes the missing
// parent).
func TestNestedCreateThroughTheSessionNeverActsWhereTheMountWouldNot(t *testing.T) {
	outside := t.TempDir()
	for name, lay := range map[string]func(t *testing.T, a *Area, dir string){
		"inside a volume": func(t *testing.T, a *Area, dir string) {
			_, err := a.Create(context.Background(), Request{Name: "pvc-outer", SubDir: "p", OnDelete: params.Delete, Mode: 0o777, UID: -1, GID: -1})
			fatalIf(t, err)
		},
		"inside a shared directory": func(t *testing.T, a *Area, dir string) {
			sh := req("pvc-sharer", "p", params.Retain)
			sh.Shared, sh.Mode = true, 0o777
			_, err := a.Create(context.Background(), sh)
			fatalIf(t, err)
		},
		"inside another share": func(t *testing.T, a *Area, dir string) {
			fatalIf(t, os.MkdirAll(filepath.Join(dir, "p", ".nfsdir"), 0o755))
		},
		"through a symlink": func(t *testing.T, a *Area, dir string) {
			fatalIf(t, os.Symlink(outside, filepath.Join(dir, "p")))
		},
		"below a file": func(t *testing.T, a *Area, dir string) {
			fatalIf(t, os.WriteFile(filepath.Join(dir, "p"), nil, 0o644))
		},
		"missing": func(t *testing.T, a *Area, dir string) {},
	} {
		t.Run(name, func(t *testing.T) {
			mountDir, mountOnly := newShare(t)
			lay(t, mountOnly, mountDir)
			_, want := mountOnly.Create(context.Background(), req("pvc-in", "p/pvc-in", params.Delete))
			dir, a := newShare(t)
			lay(t, a, dir)
			srv := &localServer{dir: dir}
			withCompounds(a, srv)
			_, err := a.Create(context.Background(), req("pvc-in", "p/pvc-in", params.Delete))
			if (err == nil) != (want == nil) || fault.KindOf(err) != fault.KindOf(want) {
				t.Errorf("Create: %v; with no session: %v", err, want)
			}
			if ents, _ := os.ReadDir(outside); len(ents) != 0 {
				t.Errorf("made through the symlink: %v", ents)
			}
			if srv.calls != 3 {
				t.Errorf("%d COMPOUNDs, want the 3 look-ups only", srv.calls)
			}
			if want == nil {
				if _, err := os.Stat(filepath.Join(dir, ".nfsdir/parents", parentMarker("p"))); err != nil {
					t.Errorf("the parent made through the mount is not marked: %v", err)
				}
				return
			}
			if _, err := os.Lstat(filepath.Join(dir, "p/pvc-in")); err == nil {
				t.Error("a directory was made")
			}
			if rec, _ := readRecord(a.records(), volumeid.KeyForDir("p/pvc-in")); rec != nil {
				t.Errorf("a record stays: %+v", rec)
			}
		})
	}
}

// TestNestedCreateThroughTheSessionUndoneWhenAVolumeAroundItComes: a
// volume created at the parent between the first look-ups and the
// directory (its record first, as always) is found by the look-ups made
// again with the seal: the new directory and its record are undone, and
// the call says why, as through the mount.
func TestNestedCreateThroughTheSessionUndoneWhenAVolumeAroundItComes(t *testing.T) {
	dir, a := newShare(t)
	withCompounds(a, &localServer{dir: dir})
	fatalIf(t, os.Mkdir(filepath.Join(dir, "team"), 0o755))
	outer := &Record{Version: RecordVersion, Name: "pvc-outer", Token: "aaaaaaaa", SubDir: "team", OnDelete: params.Delete, Mode: 0o770, UID: -1, GID: -1}
	StepHook = func(step, subDir string) {
		if step == "create:dir" && subDir == "team/pvc-in" {
			fatalIf(t, writeRecordExclusive(a.records(), outer.Key(), outer))
		}
	}
	t.Cleanup(func() { StepHook = func(string, string) {} })
	_, err := a.Create(context.Background(), req("pvc-in", "team/pvc-in", params.Delete))
	if !fault.Is(err, fault.InvalidArgument) {
		t.Errorf("Create: %v, want InvalidArgument", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "team/pvc-in")); err == nil {
		t.Error("the directory made inside the new volume stays")
	}
	if rec, _ := readRecord(a.records(), volumeid.KeyForDir("team/pvc-in")); rec != nil {
		t.Errorf("its record stays: %+v", rec)
	}
}

// TestNestedDeleteThroughTheSession: an empty volume below a parent is
// deleted in 5 COMPOUNDs (4 look-ups at once, the parent walked through;
// then the move from that parent, its VERIFY, the removals, and the
// removal of the parent, which fails while another volume is in it), and
// the parent nfsdir made goes, with its marker, with the last volume in
// it.
func TestNestedDeleteThroughTheSession(t *testing.T) {
	dir, a := newShare(t)
	srv := &localServer{dir: dir}
	withCompounds(a, srv)
	ctx := context.Background()
	first, err := a.Create(ctx, req("pvc-0", "team/pvc-0", params.Delete)) // makes the parent, through the mount
	fatalIf(t, err)
	var ids []volumeid.ID
	for _, name := range []string{"pvc-1", "pvc-2"} {
		rec, err := a.Create(ctx, req(name, "team/"+name, params.Delete))
		fatalIf(t, err)
		ids = append(ids, volumeid.ID{Key: rec.Key(), Token: rec.Token})
	}
	_, err = a.Delete(ctx, volumeid.ID{Key: first.Key(), Token: first.Token})
	fatalIf(t, err)
	srv.calls = 0
	purge, err := a.Delete(ctx, ids[0])
	fatalIf(t, err)
	if purge || srv.calls != 5 {
		t.Errorf("DeleteVolume: purge %v after %d COMPOUNDs, want no purge after 5", purge, srv.calls)
	}
	if _, err := os.Lstat(filepath.Join(dir, "team/pvc-1")); err == nil {
		t.Error("team/pvc-1 stays")
	}
	if _, err := os.Lstat(filepath.Join(dir, "team")); err != nil {
		t.Errorf("the parent, with team/pvc-2 in it: %v", err)
	}
	srv.calls = 0
	_, err = a.Delete(ctx, ids[1])
	fatalIf(t, err)
	if _, err := os.Lstat(filepath.Join(dir, "team")); err == nil || srv.calls != 5 {
		t.Errorf("the parent nfsdir made, after its last volume, in its COMPOUND (%d in all, want 5): %v", srv.calls, err)
	}
	if _, err := os.Lstat(filepath.Join(dir, ".nfsdir/parents", parentMarker("team"))); err == nil {
		t.Error("the marker of the parent removed stays")
	}
	for _, id := range ids {
		if rec, _ := readRecord(a.records(), id.Key); rec != nil {
			t.Errorf("a record stays: %+v", rec)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, trashDir)); len(ents) != 0 {
		t.Errorf("the trash holds %v", ents)
	}
}

// TestNestedDeleteThroughTheSessionNeverRemovesAReplacement: an empty
// directory put at the volume's path between the look-ups and the move
// is moved, caught by the VERIFY of the checked directory before its
// removal, and put back; the call is FailedPrecondition, and the volume's own directory,
// moved aside by whoever swapped them, stays.
func TestNestedDeleteThroughTheSessionNeverRemovesAReplacement(t *testing.T) {
	dir, a := newShare(t)
	withCompounds(a, &localServer{dir: dir})
	ctx := context.Background()
	fatalIf(t, os.Mkdir(filepath.Join(dir, "team"), 0o755))
	rec, err := a.Create(ctx, req("pvc-1", "team/pvc-1", params.Delete))
	fatalIf(t, err)
	StepHook = func(step, subDir string) {
		if step == "delete:move" && subDir == "team/pvc-1" {
			StepHook = func(string, string) {}
			fatalIf(t, os.Rename(filepath.Join(dir, "team/pvc-1"), filepath.Join(dir, "team/moved")))
			fatalIf(t, os.Mkdir(filepath.Join(dir, "team/pvc-1"), 0o770)) // empty: only VERIFY keeps it
		}
	}
	t.Cleanup(func() { StepHook = func(string, string) {} })
	_, err = a.Delete(ctx, volumeid.ID{Key: rec.Key(), Token: rec.Token})
	if !fault.Is(err, fault.FailedPrecondition) {
		t.Errorf("Delete: %v, want FailedPrecondition", err)
	}
	if st, err := os.Lstat(filepath.Join(dir, "team/pvc-1")); err != nil || !st.IsDir() {
		t.Errorf("the replacement is not back at its path: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "team/moved")); err != nil {
		t.Errorf("the volume's own directory: %v", err)
	}
}
