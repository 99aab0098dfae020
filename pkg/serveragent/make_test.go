package serveragent_test

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/gidrange"
	"github.com/nfsdir/nfsdir/pkg/params"
	"github.com/nfsdir/nfsdir/pkg/provision"
	"github.com/nfsdir/nfsdir/pkg/serveragent"
	"github.com/nfsdir/nfsdir/pkg/volumeid"
)

// ownerOf returns the owner and mode of p, not following a symlink.
func ownerOf(t *testing.T, p string) (uint32, uint32, fs.FileMode) {
	t.Helper()
	st, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	sys := st.Sys().(*syscall.Stat_t)
	return sys.Uid, sys.Gid, st.Mode()
}

// A volume of a class that names a copy agent is made and deleted by the
// agent, on its side, through the controller's own Create and Delete:
// the record is sealed with the server's handle, a replay answers the
// same volume, the controller's checks through its side accept it, and
// the delete moves it into the trash. An agent that does not serve the
// share leaves both to the controller.
func TestVolumesMadeAndDeletedByTheAgent(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	var audit lockedBuffer
	pool, endpoint := serveAgent(t, serveragent.Config{CopyExports: []serveragent.Export{{Share: "/e", Dir: dir}},
		FirstProject: 1, LastProject: 9, Audit: &audit})
	a := controllerArea(t, dir, pool)
	req := provision.Request{Name: "pvc-a", SubDir: "team/pvc-a", OnDelete: params.Delete, Mode: 0o2770, UID: -1, GID: 1234,
		CapacityBytes: 1 << 20, CopyAgent: endpoint}
	rec, err := a.Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if rec.FileID == 0 || rec.ServerHandle == "" || rec.Handle != "" || rec.CopyAgent != endpoint {
		t.Errorf("record made by the agent: %+v", rec)
	}
	if _, gid, mode := ownerOf(t, filepath.Join(dir, "team/pvc-a")); gid != 1234 || mode.Perm() != 0o770 || mode&fs.ModeSetgid == 0 {
		t.Errorf("the volume's directory: gid %d, mode %v", gid, mode)
	}
	again, err := a.Create(ctx, req)
	if err != nil || again.Token != rec.Token {
		t.Fatalf("replayed CreateVolume: %+v, %v", again, err)
	}
	id := volumeid.ID{Key: rec.Key(), Token: rec.Token}
	if got, err := a.Lookup(id); err != nil || got == nil || got.ServerHandle != rec.ServerHandle {
		t.Fatalf("the controller reads %+v, %v", got, err)
	}
	// What the controller checks on its side (a fill's or an expansion's
	// record update, a delete through its mount) takes the agent's seal:
	// the fileid, with no NFS handle to compare.
	if _, err := a.Expand(id, 2<<20); err != nil {
		t.Errorf("expansion of a volume the agent made: %v", err)
	}
	if made := a.Agents().Made(id); made == nil || made.ServerHandle != rec.ServerHandle || made.CopyAgent != endpoint {
		t.Errorf("the controller does not remember what the agent made: %+v", made)
	}
	// A volume holding data goes into the trash, for the controller's
	// purge.
	if err := os.WriteFile(filepath.Join(dir, "team/pvc-a/data"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if purge, err := a.DeleteFound(ctx, id, a.Agents().Made(id)); err != nil || !purge {
		t.Fatalf("delete of a volume holding data: purge %v, %v", purge, err)
	}
	if made := a.Agents().Made(id); made != nil {
		t.Errorf("a deleted volume is still remembered: %+v", made)
	}
	if _, err := os.Lstat(filepath.Join(dir, "team/pvc-a")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the deleted volume's directory: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, ".nfsdir/trash", rec.Key()+"."+rec.Token)); err != nil {
		t.Errorf("the deleted volume is not in the trash: %v", err)
	}
	if got, err := a.Lookup(id); err != nil || got != nil {
		t.Errorf("record after the delete: %+v, %v", got, err)
	}
	for op, want := range map[string]int{`"op":"make"`: 2, `"op":"remove"`: 1} {
		if n := strings.Count(audit.String(), op); n != want {
			t.Errorf("%d audit lines %s, want %d:\n%s", n, op, want, audit.String())
		}
	}
	if strings.Contains(audit.String(), `"error"`) {
		t.Errorf("audit trail:\n%s", audit.String())
	}

	// Another share: the controller makes and deletes it itself, with
	// the NFS handle's kind of seal.
	a.Agents().Use(pool, "/other")
	req.Name, req.SubDir = "pvc-b", "pvc-b"
	b, err := a.Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if b.ServerHandle != "" || b.Handle == "" {
		t.Errorf("a volume the controller made: %+v", b)
	}
	// Once the agent serves the share, a volume sealed through the mount
	// stays the controller's: the agent cannot compare its handle, and
	// says so before it changes anything.
	a.Agents().Use(pool, "/e")
	bID := volumeid.ID{Key: b.Key(), Token: b.Token}
	_, err = pool.RemoveVolume(ctx, endpoint, provision.RemoteRemove{Share: "/e", Key: b.Key(), Token: b.Token})
	if !fault.Is(err, fault.Unimplemented) {
		t.Errorf("the agent asked to delete a volume sealed through NFS: %v", err)
	}
	if again, err := a.Create(ctx, req); err != nil || again.Token != b.Token || again.ServerHandle != "" {
		t.Errorf("replay of a volume sealed through NFS: %+v, %v", again, err)
	}
	if purge, err := a.Delete(ctx, bID); err != nil || purge {
		t.Fatalf("the controller's delete of an empty volume: purge %v, %v", purge, err)
	}
	if ents, err := os.ReadDir(filepath.Join(dir, ".nfsdir/trash")); err != nil || len(ents) != 1 {
		t.Errorf("the trash holds %v (%v); want only pvc-a", ents, err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "pvc-b")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the controller did not delete it: %v", err)
	}

	// Whatever a caller sends, the agent acts only as Create and Delete
	// would: a path out of the share, or a key that is no record's, is
	// refused.
	_, err = pool.MakeVolume(ctx, endpoint, provision.RemoteMake{Share: "/e", Request: provision.Request{Name: "x", SubDir: "../x", Mode: 0o755, UID: -1, GID: -1}})
	if !fault.Is(err, fault.InvalidArgument) {
		t.Errorf("a volume out of the share: %v", err)
	}
	_, err = pool.RemoveVolume(ctx, endpoint, provision.RemoteRemove{Share: "/e", Key: "../../etc", Token: "aaaaaaaa"})
	if !fault.Is(err, fault.InvalidArgument) {
		t.Errorf("a key out of the records: %v", err)
	}
}

// On a share whose nfsdir files belong to another user (root_squash
// maps the controller's root to nobody), the agent makes and deletes as
// that user: what it makes is owned as if the controller made it through
// its mount, and it cannot give a directory away any more than the
// controller could.
func TestTheAgentActsAsTheSharesOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to hand the metadata area to another user")
	}
	ctx := t.Context()
	dir := t.TempDir()
	os.Chmod(dir, 0o777)
	pool, endpoint := serveAgent(t, serveragent.Config{CopyExports: []serveragent.Export{{Share: "/e", Dir: dir}},
		FirstProject: 1, LastProject: 9})
	controllerArea(t, dir, nil).Close()
	const nobody = 65534
	filepath.WalkDir(filepath.Join(dir, ".nfsdir"), func(p string, _ fs.DirEntry, err error) error {
		if err == nil {
			err = os.Lchown(p, nobody, nobody)
		}
		return err
	})
	make := func(name string, uid int) (*provision.Record, error) {
		return pool.MakeVolume(ctx, endpoint, provision.RemoteMake{Share: "/e", Request: provision.Request{Name: name, SubDir: name,
			OnDelete: params.Delete, Mode: 0o755, UID: uid, GID: -1, CopyAgent: endpoint}})
	}
	rec, err := make("pvc-squashed", -1)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"pvc-squashed", filepath.Join(".nfsdir/volumes", rec.Key())} {
		if uid, gid, _ := ownerOf(t, filepath.Join(dir, p)); uid != nobody || gid != nobody {
			t.Errorf("%s is owned by %d:%d, not %d:%d", p, uid, gid, nobody, nobody)
		}
	}
	if _, err := make("pvc-given-away", 1000); err == nil || !strings.Contains(err.Error(), "operation not permitted") {
		t.Errorf("a chown as the squashed user: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "pvc-given-away")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the volume that could not be given its owner is left: %v", err)
	}
	// Empty, it is removed at once, by the squashed user, and the
	// controller has nothing to purge.
	if r, err := pool.RemoveVolume(ctx, endpoint, provision.RemoteRemove{Share: "/e", Key: rec.Key(), Token: rec.Token}); err != nil || r.Purge || !r.Answered {
		t.Fatalf("delete of an empty volume: %+v, %v", r, err)
	}
	for _, p := range []string{"pvc-squashed", filepath.Join(".nfsdir/trash", rec.Key()+"."+rec.Token), filepath.Join(".nfsdir/trash", "."+rec.Key()+"."+rec.Token)} {
		if _, err := os.Lstat(filepath.Join(dir, p)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s after the delete of an empty volume: %v", p, err)
		}
	}
}

// An agent that cannot be reached leaves the volume to the controller:
// made and deleted through its mount, with the NFS kind of seal.
func TestAnUnreachableAgentLeavesVolumesToTheController(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	pool, _ := serveAgent(t, serveragent.Config{CopyExports: []serveragent.Export{{Share: "/e", Dir: dir}}, FirstProject: 1, LastProject: 9})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := l.Addr().String()
	l.Close() // nobody listens there
	a := controllerArea(t, dir, pool)
	rec, err := a.Create(ctx, provision.Request{Name: "pvc-c", SubDir: "pvc-c", OnDelete: params.Delete, Mode: 0o755, UID: -1, GID: -1, CopyAgent: down})
	if err != nil || rec.Handle == "" || rec.ServerHandle != "" {
		t.Fatalf("Create with the agent down: %+v, %v", rec, err)
	}
	if _, err := a.Delete(ctx, volumeid.ID{Key: rec.Key(), Token: rec.Token}); err != nil {
		t.Fatalf("Delete with the agent down: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "pvc-c")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the volume is left: %v", err)
	}
}

// The agent keeps a share's metadata area open between calls only while
// it is the same directory: one put in its place (a share re-created, a
// backup restored) is opened anew, and the records go there.
func TestTheAgentFollowsANewMetadataArea(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	pool, endpoint := serveAgent(t, serveragent.Config{CopyExports: []serveragent.Export{{Share: "/e", Dir: dir}}, FirstProject: 1, LastProject: 9})
	openArea := func() { controllerArea(t, dir, nil).Close() }
	make := func(name string) *provision.Record {
		rec, err := pool.MakeVolume(ctx, endpoint, provision.RemoteMake{Share: "/e", Request: provision.Request{Name: name, SubDir: name,
			OnDelete: params.Delete, Mode: 0o755, UID: -1, GID: -1, CopyAgent: endpoint}})
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	openArea()
	first := make("pvc-first")
	if err := os.Rename(filepath.Join(dir, ".nfsdir"), filepath.Join(dir, "old-nfsdir")); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.MakeVolume(ctx, endpoint, provision.RemoteMake{Share: "/e", Request: provision.Request{Name: "x", SubDir: "x", Mode: 0o755, UID: -1, GID: -1}}); !fault.Is(err, fault.Unimplemented) {
		t.Errorf("with no metadata area the agent answers %v, want Unimplemented", err)
	}
	openArea()
	second := make("pvc-second")
	for _, c := range []struct {
		area string
		rec  *provision.Record
	}{{"old-nfsdir", first}, {".nfsdir", second}} {
		if _, err := os.Lstat(filepath.Join(dir, c.area, "volumes", c.rec.Key())); err != nil {
			t.Errorf("record of %s not in %s: %v", c.rec.Name, c.area, err)
		}
	}
}

// Every call the Pool makes is told to its observer once it ends (the
// controller's nfsdir_agent_calls_total and its duration): the agent, the
// method and the error, an unreachable agent's included.
func TestThePoolTellsItsObserverOfEveryCall(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	pool, endpoint := serveAgent(t, serveragent.Config{CopyExports: []serveragent.Export{{Share: "/e", Dir: dir}}, FirstProject: 1, LastProject: 9})
	type call struct {
		agent, method string
		err           bool
	}
	var mu sync.Mutex
	var calls []call
	pool.Observe(func(agent, method string, err error, d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		if d <= 0 {
			t.Errorf("%s %s took %s", agent, method, d)
		}
		calls = append(calls, call{agent, method, err != nil})
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := l.Addr().String()
	l.Close()
	a := controllerArea(t, dir, pool)
	for _, agent := range []string{endpoint, down} {
		rec, err := a.Create(ctx, provision.Request{Name: "pvc-" + agent, SubDir: "pvc-" + strings.NewReplacer(":", "-", ".", "-").Replace(agent), OnDelete: params.Delete, Mode: 0o755, UID: -1, GID: -1, CopyAgent: agent})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.Delete(ctx, volumeid.ID{Key: rec.Key(), Token: rec.Token}); err != nil {
			t.Fatal(err)
		}
	}
	want := []call{{endpoint, "MakeVolume", false}, {endpoint, "RemoveVolume", false}, {down, "MakeVolume", true}}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(calls, want) {
		t.Errorf("observed %+v, want %+v", calls, want)
	}
}

// TestTheAgentGivesAGIDOfTheRange: a volume of a class with a GID range
// that the agent makes gets a GID of the range, as its directory's group.
func TestTheAgentGivesAGIDOfTheRange(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	pool, endpoint := serveAgent(t, serveragent.Config{CopyExports: []serveragent.Export{{Share: "/e", Dir: dir}}, FirstProject: 1, LastProject: 9})
	controllerArea(t, dir, nil).Close()
	rec, err := pool.MakeVolume(ctx, endpoint, provision.RemoteMake{Share: "/e", Request: provision.Request{Name: "pvc-g", SubDir: "pvc-g",
		OnDelete: params.Delete, Mode: 0o770, UID: -1, GID: -1, CopyAgent: endpoint, GIDRange: gidrange.Range{Start: 4000, End: 4009}}})
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dir, "pvc-g"))
	if !rec.GIDFromRange || rec.GID < 4000 || rec.GID > 4009 || err != nil || int(st.Sys().(*syscall.Stat_t).Gid) != rec.GID || st.Mode()&os.ModeSetgid == 0 {
		t.Errorf("record %+v, directory %v %v", rec, st, err)
	}
}
