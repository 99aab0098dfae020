package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nfsdir/nfsdir/pkg/nfsclient"
	"github.com/nfsdir/nfsdir/pkg/nfsproto"
	"github.com/nfsdir/nfsdir/tests/lab"
)

// serverCompounds is lab.ServerCompounds, which must be readable.
func serverCompounds(t *testing.T) int64 {
	n := lab.ServerCompounds()
	if n < 0 {
		t.Fatal("no proc4 line in /proc/net/rpc/nfsd")
	}
	return n
}

// kernelFH is the server's filehandle of p, on a kernel NFS mount, as
// the kernel's client holds it (name_to_handle_at), and its fileid.
func kernelFH(t *testing.T, p string) ([]byte, uint64) {
	h, _, err := unix.NameToHandleAt(unix.AT_FDCWD, p, 0)
	must(t, err)
	fh, id, ok := nfsproto.KernelHandle(h.Bytes())
	if !ok {
		t.Fatalf("the kernel's handle of %s (%x) holds no NFS filehandle", p, h.Bytes())
	}
	return fh, id
}

// TestOneCompoundMakesWhatTheKernelMakesInSeveral: nfsdir's own NFSv4.1
// client, given the filehandle of a directory the kernel's mount holds,
// makes a record (a symlink), a directory with its mode set as it is
// made, and a seal naming the directory's fileid, in one COMPOUND: one
// call to the server where the kernel's client sends one per step. What
// it made is what the kernel's mount sees, handle for handle; a LOOKUP
// never follows a symlink; a COMPOUND stops at its first failure; and a
// server restart costs one new session, made without the caller's help.
func TestOneCompoundMakesWhatTheKernelMakesInSeveral(t *testing.T) {
	lab.Require(t)
	mnt := t.TempDir()
	lab.Sh(t, fmt.Sprintf("mount -t nfs -o nfsvers=4.2,lookupcache=none %s:%s %s", lab.Server(), lab.Export(), mnt))
	defer lab.Sh(t, "umount "+mnt)
	must(t, os.Mkdir(onExport("compound"), 0o755))
	defer os.RemoveAll(onExport("compound"))
	must(t, os.Symlink("/", onExport("compound/escape")))
	dirFH, _ := kernelFH(t, filepath.Join(mnt, "compound"))

	c := nfsclient.New(nfsclient.Config{Addr: net.JoinHostPort(lab.Server(), "2049"), Cred: nfsclient.ProcessCred()})
	defer c.Close()
	ctx := lab.Ctx(t, time.Minute)

	// The handle the kernel holds is the one the server gives for the path.
	byPath := &nfsproto.GetFH{}
	must(t, c.Do(ctx, &nfsproto.PutRootFH{}, &nfsproto.Lookup{Name: strings.Trim(lab.Export(), "/")}, &nfsproto.Lookup{Name: "compound"}, byPath))
	if !bytes.Equal(byPath.FH, dirFH) {
		t.Fatalf("the server's handle of the directory %x is not the kernel's %x", byPath.FH, dirFH)
	}

	mode := uint32(0o500)
	volFH, attrs := &nfsproto.GetFH{}, &nfsproto.GetAttr{Want: []uint32{nfsproto.AttrType, nfsproto.AttrFileID, nfsproto.AttrMode}}
	before, kernelBefore := serverCompounds(t), kernelCalls(mnt)
	must(t, c.Do(ctx,
		&nfsproto.PutFH{FH: dirFH}, &nfsproto.Create{Type: nfsproto.TypeLink, Name: "record", Link: "the record"},
		&nfsproto.PutFH{FH: dirFH}, &nfsproto.Create{Type: nfsproto.TypeDir, Name: "volume", Mode: &mode}, volFH, attrs,
		&nfsproto.PutFH{FH: dirFH}, &nfsproto.Create{Type: nfsproto.TypeLink, Name: "seal", Link: "sealed"},
	))
	calls := serverCompounds(t) - before - (kernelCalls(mnt) - kernelBefore)
	t.Logf("record, directory with its mode and seal: %d call(s) to the server", calls)
	if calls != 1 {
		t.Errorf("the COMPOUND cost the server %d calls, want 1", calls)
	}
	vol := filepath.Join(mnt, "compound/volume")
	st, err := os.Lstat(vol)
	must(t, err)
	if !st.IsDir() || st.Mode().Perm() != 0o500 || attrs.Type != nfsproto.TypeDir || attrs.Mode != 0o500 {
		t.Errorf("the directory is %v through the mount, type %d mode %o by GETATTR; want a directory of mode 0500", st.Mode(), attrs.Type, attrs.Mode)
	}
	if fh, id := kernelFH(t, vol); !bytes.Equal(fh, volFH.FH) || id != attrs.FileID || id != st.Sys().(*syscall.Stat_t).Ino {
		t.Errorf("the kernel sees handle %x fileid %d (inode %d), the COMPOUND made %x fileid %d", fh, id, st.Sys().(*syscall.Stat_t).Ino, volFH.FH, attrs.FileID)
	}
	for name, want := range map[string]string{"record": "the record", "seal": "sealed"} {
		if got, err := os.Readlink(filepath.Join(mnt, "compound", name)); err != nil || got != want {
			t.Errorf("%s: %q, %v through the mount; want %q", name, got, err, want)
		}
	}

	// A LOOKUP lands on the symlink itself, never where it points.
	link := &nfsproto.GetAttr{Want: []uint32{nfsproto.AttrType}}
	text := &nfsproto.ReadLink{}
	must(t, c.Do(ctx, &nfsproto.PutFH{FH: dirFH}, &nfsproto.Lookup{Name: "escape"}, link, text))
	if link.Type != nfsproto.TypeLink || text.Link != "/" {
		t.Errorf("LOOKUP of a symlink gave type %d, text %q", link.Type, text.Link)
	}
	err = c.Do(ctx, &nfsproto.PutFH{FH: dirFH}, &nfsproto.Lookup{Name: "escape"}, &nfsproto.Lookup{Name: "etc"})
	var oe *nfsproto.OpError
	if !errors.As(err, &oe) || oe.Index != 2 {
		t.Errorf("LOOKUP below a symlink: %v, want a failure of operation 2", err)
	}

	// The first failure ends the COMPOUND: nothing after it is made.
	err = c.Do(ctx, &nfsproto.PutFH{FH: dirFH}, &nfsproto.Create{Type: nfsproto.TypeLink, Name: "record", Link: "again"},
		&nfsproto.PutFH{FH: dirFH}, &nfsproto.Create{Type: nfsproto.TypeDir, Name: "never"})
	if !errors.As(err, &oe) || oe.Index != 1 || oe.Status != nfsproto.ErrExist {
		t.Errorf("a CREATE over an existing name: %v, want NFS4ERR_EXIST at 1", err)
	}
	if exists(onExport("compound/never")) {
		t.Error("the operations after a failed one ran")
	}

	// The server restarts: its sessions are gone, and the client makes a
	// new one on its own. The handles still name the same objects.
	lab.StopNFSServer(t)
	lab.StartNFSServer(t)
	again := &nfsproto.GetAttr{Want: []uint32{nfsproto.AttrFileID}}
	must(t, c.Do(lab.Ctx(t, 2*time.Minute), &nfsproto.PutFH{FH: volFH.FH}, again))
	if again.FileID != attrs.FileID {
		t.Errorf("after a restart the directory's handle names fileid %d, not %d", again.FileID, attrs.FileID)
	}
}

// kernelCalls is the number of calls the kernel's client sent through the
// mount at dir.
func kernelCalls(dir string) int64 {
	var n int64
	for _, c := range lab.NFSOps(dir) {
		n += c
	}
	return n
}
