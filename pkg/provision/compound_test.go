package provision

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
	a.compounds = &compounds{c: c, rootFH: []byte{1}, volumeFH: []byte{2}}
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

// TestCreateThroughTheSessionOnlyForWhatItMakes: nested, shared, owned and
// filled volumes go through the mount.
func TestCreateThroughTheSessionOnlyForWhatItMakes(t *testing.T) {
	_, a := newShare(t)
	f := &fakeCompounder{err: errors.New("must not be called")}
	withCompounds(a, f)
	owned := req("pvc-owned", "pvc-owned", params.Delete)
	owned.UID = os.Getuid()
	shared := req("pvc-shared", "shared", params.Retain)
	shared.Shared = true
	for _, r := range []Request{req("pvc-nested", "team/pvc-nested", params.Delete), owned, shared} {
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

// localServer plays the server for a share at dir on a local file system:
// it runs the first COMPOUND (the record, the directory, its handle and
// attributes); to the second (the seal) it answers seal after making the
// seal's link, when seal is set; and it runs any SETATTR of the mode.
type localServer struct {
	dir   string
	seal  error
	calls int
	made  string
}

func (s *localServer) Do(_ context.Context, ops ...nfsproto.Op) error {
	s.calls++
	for i, op := range ops {
		switch o := op.(type) {
		case *nfsproto.Create:
			if o.Type == nfsproto.TypeLink {
				if err := os.Symlink(o.Link, filepath.Join(s.dir, volumesDir, o.Name)); err != nil {
					return &nfsproto.OpError{Index: i, Op: "CREATE", Status: nfsproto.ErrExist}
				}
				if s.calls == 2 && s.seal != nil {
					return s.seal
				}
				continue
			}
			s.made = filepath.Join(s.dir, o.Name)
			if err := os.Mkdir(s.made, os.FileMode(*o.Mode)); err != nil {
				return &nfsproto.OpError{Index: i, Op: "CREATE", Status: nfsproto.ErrExist}
			}
		case *nfsproto.GetFH:
			o.FH = []byte("the handle")
		case *nfsproto.GetAttr:
			st, err := os.Stat(s.made)
			if err != nil {
				return err
			}
			o.Type, o.FileID = nfsproto.TypeDir, st.Sys().(*syscall.Stat_t).Ino
		case *nfsproto.Rename:
			dir := filepath.Join(s.dir, volumesDir)
			if err := os.Rename(filepath.Join(dir, o.Old), filepath.Join(dir, o.New)); err != nil {
				return err
			}
		case *nfsproto.SetMode:
			if err := os.Chmod(s.made, modeBits(o.Mode)); err != nil {
				return err
			}
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
			typ, h := nfsproto.KernelHandleOf([]byte("the handle"), rec.FileID, nfsproto.ModeDir)
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
