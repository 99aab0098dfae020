package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nfsdir/nfsdir/tests/lab"
)

// TestRootSquashedExport: on a root_squash export nfsdir works where the
// server lets the squashed user work, and otherwise fails with
// PermissionDenied naming the export option, never leaving a half-made
// volume behind.
func TestRootSquashedExport(t *testing.T) {
	c := start(t, nil)
	squash := func(kv ...string) map[string]string {
		p := params(kv...)
		p["share"] = lab.SquashExport()
		return p
	}
	onSquash := func(rel string) string { return filepath.Join(lab.SquashExport(), rel) }

	// The share root is world-writable: the squashed user can provision.
	v := c.Create(t, "pvc-squash-ok", squash(), lab.RWX("nfsvers=4.2"))
	st, err := os.Stat(onSquash("pvc-squash-ok"))
	if err != nil || st.Sys().(*syscall.Stat_t).Uid != 65534 {
		t.Fatalf("volume on a squashed export: %v %v", st, err)
	}
	c.Delete(t, v)
	if exists(onSquash("pvc-squash-ok")) {
		t.Error("volume not deleted")
	}

	// Changing the owner needs root: refused, and nothing is left.
	err = createErr(c, t, "pvc-squash-owner", squash("uid", "1000", "gid", "1000"))
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "root_squash") {
		t.Errorf("chown on a squashed export: %v", err)
	}
	if exists(onSquash("pvc-squash-owner")) {
		t.Error("half-made volume left behind")
	}
	if ents, _ := os.ReadDir(onSquash(".nfsdir/volumes")); len(ents) != 0 {
		t.Errorf("records left behind: %v", ents)
	}

	// A share root only root may write to: refused, nothing created.
	lab.Sh(t, "rm -rf "+onSquash(".nfsdir")+" && chmod 0755 "+lab.SquashExport())
	defer lab.Sh(t, "chmod 0777 "+lab.SquashExport())
	c2 := start(t, nil) // a fresh controller: no cached metadata area
	err = createErr(c2, t, "pvc-squash-denied", squash())
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "root_squash") {
		t.Errorf("read-only share root on a squashed export: %v", err)
	}
	if ents, _ := os.ReadDir(lab.SquashExport()); len(ents) != 0 {
		t.Errorf("created on a share it cannot write: %v", ents)
	}
}
