package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nfsdir/nfsdir/pkg/export"
	"github.com/nfsdir/nfsdir/pkg/volumeid"
	"github.com/nfsdir/nfsdir/tests/lab"
)

// exportListing returns every path on the export outside .nfsdir.
func exportListing(t *testing.T) []string {
	t.Helper()
	var out []string
	filepath.Walk(lab.Export(), func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(lab.Export(), p)
		if rel == ".nfsdir" {
			return filepath.SkipDir
		}
		out = append(out, rel)
		return nil
	})
	sort.Strings(out)
	return out
}

func createErr(c *lab.Client, t *testing.T, name string, p map[string]string) error {
	_, err := c.Controller.CreateVolume(lab.Ctx(t, time.Minute), &csi.CreateVolumeRequest{
		Name: name, Parameters: p, VolumeCapabilities: []*csi.VolumeCapability{lab.RWX()}})
	return err
}

func deleteErr(c *lab.Client, t *testing.T, id string) error {
	_, err := c.Controller.DeleteVolume(lab.Ctx(t, time.Minute), &csi.DeleteVolumeRequest{VolumeId: id})
	return err
}

// TestRejectedSubDirForms: every subDir that is, or escapes to, the share
// root, the metadata area or outside the share is refused and nothing on
// the export changes.
func TestRejectedSubDirForms(t *testing.T) {
	c := start(t, nil)
	check := canaries(t)
	defer check()
	before := exportListing(t)
	for _, sub := range []string{".", "/", "./", "//", "..", "../x", "a/../..", "a/..", "/abs", "/export", ".nfsdir",
		".nfsdir/trash", ".nfsdir/volumes/x", "a//b", "a/./b", "x\x00y"} {
		if err := createErr(c, t, "pvc-bad", params("subDir", sub)); status.Code(err) != codes.InvalidArgument {
			t.Errorf("subDir %q: %v, want InvalidArgument", sub, err)
		}
	}
	for _, tc := range []struct{ name, ns string }{{"..", "x"}, {".", "x"}, {"x", ".."}, {".nfsdir", "x"}} {
		err := createErr(c, t, "pvc-bad", params("subDir", "${pvc.metadata.name}/${pvc.metadata.namespace}",
			"csi.storage.k8s.io/pvc/name", tc.name, "csi.storage.k8s.io/pvc/namespace", tc.ns))
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("template with name %q namespace %q: %v", tc.name, tc.ns, err)
		}
	}
	// share "/" with the export's own name as subDir names the export root
	// through the NFSv4 pseudo root: refused, nothing wiped.
	p := params("subDir", strings.TrimPrefix(lab.Export(), "/"))
	p["share"] = "/"
	if err := createErr(c, t, "pvc-root-alias", p); err == nil {
		t.Errorf("share / + subDir %s was accepted", lab.Export())
	}
	if after := exportListing(t); strings.Join(after, "\n") != strings.Join(before, "\n") {
		t.Errorf("export changed:\nbefore %v\nafter  %v", before, after)
	}
}

// TestForeignDirectoryNamedByCraftedIDs plants a directory nfsdir did not
// create and aims every kind of ID at it, with every onDelete policy.
func TestForeignDirectoryNamedByCraftedIDs(t *testing.T) {
	c := start(t, nil)
	check := canaries(t)
	defer check()
	os.MkdirAll(onExport("foreign/inner"), 0o755)
	os.WriteFile(onExport("foreign/inner/data"), []byte("precious"), 0o644)
	exp := export.Export{Server: lab.Server(), Share: lab.Export()}
	var native []string
	for _, opts := range []string{"", "nfsvers=4.1", "nfsvers=3"} {
		for _, key := range []string{volumeid.KeyForDir("foreign"), volumeid.KeyForDir("foreign/inner"), volumeid.KeyForShared("foreign", "x")} {
			id, _ := volumeid.New(exp, key, volumeid.NewToken(), opts, "")
			native = append(native, id.String())
		}
	}
	for _, id := range native {
		if err := deleteErr(c, t, id); err != nil {
			t.Errorf("crafted nfsdir ID %q: %v, want OK and nothing done", id, err)
		}
	}
	share := strings.TrimPrefix(lab.Export(), "/")
	for _, policy := range []string{"", "delete", "retain", "archive"} {
		for _, sub := range []string{"foreign", "foreign/inner", "", "foreign/../foreign"} {
			id := lab.Server() + "#" + share + "#" + sub + "#pvc-x#" + policy
			err := deleteErr(c, t, id)
			if sub == "foreign/../foreign" {
				if err != nil && status.Code(err) != codes.FailedPrecondition {
					t.Errorf("legacy ID %q: %v", id, err)
				}
				continue
			}
			if policy == "retain" {
				// Retaining touches nothing: OK, as csi-driver-nfs
				// answers (the data is checked below).
				if err != nil {
					t.Errorf("legacy ID %q: %v, want OK and nothing done", id, err)
				}
				continue
			}
			if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "did not create") {
				t.Errorf("legacy ID %q: %v, want FailedPrecondition", id, err)
			}
		}
	}
	if b, err := os.ReadFile(onExport("foreign/inner/data")); err != nil || string(b) != "precious" {
		t.Fatalf("foreign data touched: %q %v", b, err)
	}
	if ents, _ := filepath.Glob(onExport("archived-foreign*")); len(ents) > 0 {
		t.Errorf("archived something: %v", ents)
	}
	// The legacy directory gone: deleting its ID is an idempotent success.
	os.RemoveAll(onExport("foreign"))
	if err := deleteErr(c, t, lab.Server()+"#"+share+"#foreign#pvc-x#delete"); err != nil {
		t.Errorf("legacy ID of a removed directory: %v", err)
	}
}

// TestTemplateCollision: a template that is not unique per claim maps two
// claims to one directory; the second is refused, naming the first.
func TestTemplateCollision(t *testing.T) {
	c := start(t, nil)
	check := canaries(t)
	defer check()
	p := func(pvc, pv string) map[string]string {
		return params("subDir", "${pvc.metadata.namespace}", "csi.storage.k8s.io/pvc/namespace", "team-x",
			"csi.storage.k8s.io/pvc/name", pvc, "csi.storage.k8s.io/pv/name", pv)
	}
	a := c.Create(t, "pvc-a", p("a", "pvc-a"), lab.RWX())
	os.WriteFile(onExport("team-x/a-data"), []byte("a"), 0o644)
	err := createErr(c, t, "pvc-b", p("b", "pvc-b"))
	if status.Code(err) != codes.AlreadyExists || !strings.Contains(err.Error(), `"pvc-a"`) {
		t.Fatalf("second claim on team-x: %v", err)
	}
	// Nesting either way is refused too.
	if err := createErr(c, t, "pvc-c", params("subDir", "team-x/c")); status.Code(err) != codes.InvalidArgument {
		t.Errorf("volume inside pvc-a: %v", err)
	}
	if b, err := os.ReadFile(onExport("team-x/a-data")); err != nil || string(b) != "a" {
		t.Fatal("pvc-a's data touched")
	}
	c.Delete(t, a)
}

// TestSharedSubDirOptIn: with allowSharedSubDir and onDelete retain, two
// volumes use one directory, and deleting both keeps the data.
func TestSharedSubDirOptIn(t *testing.T) {
	c := start(t, nil)
	if err := createErr(c, t, "pvc-s0", params("subDir", "shared", "allowSharedSubDir", "true", "onDelete", "delete")); status.Code(err) != codes.InvalidArgument {
		t.Errorf("sharing with onDelete delete: %v", err)
	}
	vc := lab.RWX("nfsvers=4.2")
	p := params("subDir", "shared", "allowSharedSubDir", "true", "onDelete", "retain")
	s1 := c.Create(t, "pvc-s1", p, vc)
	s2 := c.Create(t, "pvc-s2", p, vc)
	base := t.TempDir()
	c.Publish(t, s1, filepath.Join(base, "1"), vc, false)
	c.Publish(t, s2, filepath.Join(base, "2"), vc, false)
	os.WriteFile(filepath.Join(base, "1", "f"), []byte("shared"), 0o644)
	if b, err := os.ReadFile(filepath.Join(base, "2", "f")); err != nil || string(b) != "shared" {
		t.Fatalf("not shared: %q %v", b, err)
	}
	if err := createErr(c, t, "pvc-s3", params("subDir", "shared")); status.Code(err) != codes.AlreadyExists {
		t.Errorf("exclusive volume over a shared directory: %v", err)
	}
	c.Unpublish(t, s1, filepath.Join(base, "1"))
	c.Unpublish(t, s2, filepath.Join(base, "2"))
	c.Delete(t, s1)
	c.Delete(t, s2)
	if b, err := os.ReadFile(onExport("shared/f")); err != nil || string(b) != "shared" {
		t.Fatalf("shared data after deleting both: %q %v", b, err)
	}
}

// TestLegacyVolumePublishes: a csi-driver-nfs volume handle publishes with
// or without attributes (static PV), as does an inline ephemeral volume's
// attributes with kubelet's pod-info keys, and is never deleted.
func TestLegacyVolumePublishes(t *testing.T) {
	c := start(t, nil)
	os.MkdirAll(onExport("legacy-pvc"), 0o777)
	os.WriteFile(onExport("legacy-pvc/data"), []byte("old"), 0o644)
	id := lab.Server() + "#" + strings.TrimPrefix(lab.Export(), "/") + "#legacy-pvc#legacy-pvc#"
	vc := lab.RWX("nfsvers=4.1")
	base := t.TempDir()
	inline := map[string]string{"server": lab.Server(), "share": lab.Export(), "subDir": "legacy-pvc", "mountOptions": "nfsvers=4.1",
		"csi.storage.k8s.io/ephemeral": "true", "csi.storage.k8s.io/pod.name": "web-0", "csi.storage.k8s.io/pod.namespace": "team-a"}
	for i, ctx := range []map[string]string{nil, {"server": lab.Server(), "share": lab.Export(), "subDir": "legacy-pvc"}, inline} {
		target := filepath.Join(base, string(rune('a'+i)))
		c.Publish(t, &csi.Volume{VolumeId: id, VolumeContext: ctx}, target, vc, false)
		if b, err := os.ReadFile(filepath.Join(target, "data")); err != nil || string(b) != "old" {
			t.Errorf("legacy volume content: %q %v", b, err)
		}
		c.Unpublish(t, &csi.Volume{VolumeId: id}, target)
	}
	if err := deleteErr(c, t, id); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("DeleteVolume of a legacy volume: %v", err)
	}
	if _, err := os.Stat(onExport("legacy-pvc/data")); err != nil {
		t.Fatal("legacy data deleted")
	}
}

// TestCrashBetweenDirectoryAndRecord recreates the state a controller
// killed between moving a volume away and removing its record leaves, and
// retries the delete.
func TestCrashBetweenDirectoryAndRecord(t *testing.T) {
	c := start(t, nil)
	check := canaries(t)
	defer check()
	for _, policy := range []string{"delete", "archive"} {
		name := "pvc-crash-" + policy
		v := c.Create(t, name, params("onDelete", policy), lab.RWX())
		id, err := volumeid.Parse(v.VolumeId)
		if err != nil {
			t.Fatal(err)
		}
		record := onExport(".nfsdir/volumes/" + id.Key)
		moved := onExport(".nfsdir/trash/" + id.Key + "." + id.Token)
		if policy == "archive" {
			moved = onExport("archived-" + name)
		}
		if err := os.Rename(onExport(name), moved); err != nil {
			t.Fatal(err)
		}
		if !exists(record) {
			t.Fatal("record missing before the retry")
		}
		c.Delete(t, v)
		if exists(record) || exists(onExport(name)) {
			t.Errorf("%s: record %v, directory %v after the retry", policy, exists(record), exists(onExport(name)))
		}
		if policy == "archive" && !exists(moved) {
			t.Error("archived directory lost")
		}
	}
	waitTrashEmpty(t)
}

// adopt runs `nfsdir adopt` on subDir of the lab's export with more
// arguments, and returns the volume ID it printed (if any) and its output.
func adopt(t *testing.T, subDir string, args ...string) (id, out string, err error) {
	t.Helper()
	bin, lerr := exec.LookPath("nfsdir")
	if lerr != nil {
		t.Fatalf("the lab must carry the nfsdir binary (make test-nfs puts it on PATH): %v", lerr)
	}
	args = append([]string{"adopt", "--server", lab.Server(), "--share", lab.Export(), "--subdir", subDir,
		"--mount-options", "nfsvers=4.1", "--state-dir", t.TempDir()}, args...)
	b, err := exec.Command(bin, args...).CombinedOutput()
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "volume ID: "); ok {
			id = v
		}
	}
	return id, string(b), err
}

// TestAdoptNeverTakesALiveVolume: adopt refuses a directory that holds a
// volume, lies inside one, or is a shared volume's directory; nothing is
// recorded and the volumes' data stays. (Issue 11 #6: adopting team-b
// with onDelete delete, then deleting it, trashed the live team-b/db.)
func TestAdoptNeverTakesALiveVolume(t *testing.T) {
	c := start(t, nil)
	check := canaries(t)
	defer check()
	db := c.Create(t, "pvc-adopt-db", params("subDir", "adopt-team/db", "onDelete", "delete"), lab.RWX())
	os.WriteFile(onExport("adopt-team/db/table"), []byte("rows"), 0o644)
	shared := c.Create(t, "pvc-adopt-shared", params("subDir", "adopt-common", "allowSharedSubDir", "true", "onDelete", "retain"), lab.RWX())
	os.MkdirAll(onExport("adopt-team/db/inner"), 0o755)
	temps := tempRecords(t)
	before := recordNames(t, temps...)
	for _, sub := range []string{"adopt-team", "adopt-team/db", "adopt-team/db/inner", "adopt-common"} {
		id, out, err := adopt(t, sub, "--on-delete", "delete")
		if err == nil || id != "" {
			t.Errorf("adopt %s: accepted (ID %q)\n%s", sub, id, out)
			continue
		}
		t.Logf("adopt %s refused: %s", sub, strings.TrimSpace(out))
	}
	if after := recordNames(t, temps...); strings.Join(after, " ") != strings.Join(before, " ") {
		t.Errorf("records changed: before %v, after %v", before, after)
	}
	if b, err := os.ReadFile(onExport("adopt-team/db/table")); err != nil || string(b) != "rows" {
		t.Errorf("the volume's data: %q %v", b, err)
	}
	// A plain directory beside them is still adopted.
	os.MkdirAll(onExport("adopt-team-legacy"), 0o755)
	if id, out, err := adopt(t, "adopt-team-legacy"); err != nil || id == "" {
		t.Errorf("adopt of a plain directory: %v\n%s", err, out)
	} else if err := deleteErr(c, t, id); err != nil {
		t.Errorf("delete of the adopted directory: %v", err)
	}
	c.Delete(t, db)
	c.Delete(t, shared)
}

// TestAdoptThenDelete hands a directory nfsdir did not create over with
// `nfsdir adopt`; the printed ID then deletes (archives) it like a volume.
func TestAdoptThenDelete(t *testing.T) {
	c := start(t, nil)
	os.MkdirAll(onExport("legacy-adopt/pvc-9"), 0o755)
	os.WriteFile(onExport("legacy-adopt/pvc-9/data"), []byte("keep"), 0o644)
	id, out, err := adopt(t, "legacy-adopt/pvc-9", "--name", "pvc-9", "--on-delete", "archive")
	if err != nil {
		t.Fatalf("nfsdir adopt: %v\n%s", err, out)
	}
	if _, err := volumeid.Parse(id); err != nil {
		t.Fatalf("adopt printed no usable ID: %v\n%s", err, out)
	}
	if err := deleteErr(c, t, id); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(onExport("archived-legacy-adopt-pvc-9/data")); err != nil || string(b) != "keep" {
		t.Fatalf("adopted volume not archived: %q %v", b, err)
	}
	if !exists(onExport("legacy-adopt")) {
		t.Error("removed a parent nfsdir did not create")
	}
}

// TestAdoptedLegacyVolume: nfsdir serving under csi-driver-nfs's name
// keeps a csi-driver-nfs PV as it is; once its directory is adopted for
// exactly its handle (`nfsdir adopt --legacy-id`, as `nfsdir migrate`
// does in drop-in mode), the PV still publishes, and DeleteVolume of that
// handle follows the recorded policy; another handle naming the same
// directory is still refused.
func TestAdoptedLegacyVolume(t *testing.T) {
	c := start(t, nil)
	os.MkdirAll(onExport("legacy-drop/pvc-7"), 0o777)
	os.WriteFile(onExport("legacy-drop/pvc-7/data"), []byte("old"), 0o644)
	handle := lab.Server() + "#" + strings.TrimPrefix(lab.Export(), "/") + "#legacy-drop/pvc-7#pvc-7#delete"
	if _, out, err := adopt(t, "legacy-drop/pvc-7", "--name", "pvc-7", "--on-delete", "delete", "--legacy-id", handle); err != nil {
		t.Fatalf("nfsdir adopt: %v\n%s", err, out)
	}
	if _, out, err := adopt(t, "legacy-drop/pvc-7", "--name", "pvc-7", "--on-delete", "delete", "--legacy-id", handle); err != nil {
		t.Errorf("the same adoption again: %v\n%s", err, out)
	}
	target := filepath.Join(t.TempDir(), "t")
	c.Publish(t, &csi.Volume{VolumeId: handle}, target, lab.RWX("nfsvers=4.1"), false)
	if b, err := os.ReadFile(filepath.Join(target, "data")); err != nil || string(b) != "old" {
		t.Errorf("adopted legacy volume content: %q %v", b, err)
	}
	c.Unpublish(t, &csi.Volume{VolumeId: handle}, target)
	other := strings.Replace(handle, "#pvc-7#delete", "#pvc-other#delete", 1)
	if err := deleteErr(c, t, other); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("DeleteVolume of another handle for the adopted directory: %v", err)
	}
	if !exists(onExport("legacy-drop/pvc-7/data")) {
		t.Fatal("another handle's DeleteVolume removed the adopted data")
	}
	for range 2 {
		if err := deleteErr(c, t, handle); err != nil {
			t.Fatalf("DeleteVolume of the adopted handle: %v", err)
		}
	}
	if exists(onExport("legacy-drop/pvc-7")) {
		t.Error("onDelete delete: the adopted directory is still in place")
	}
	if !exists(onExport("legacy-drop")) {
		t.Error("removed a parent nfsdir did not create")
	}
	waitTrashEmpty(t)
}

// TestReplacedDirectoryIsNotDeleted: a volume's directory moved away and
// another put at its path: DeleteVolume refuses, both are untouched.
func TestReplacedDirectoryIsNotDeleted(t *testing.T) {
	c := start(t, nil)
	check := canaries(t)
	defer check()
	v := c.Create(t, "pvc-replaced", params("onDelete", "delete"), lab.RWX())
	lab.Sh(t, "mv "+onExport("pvc-replaced")+" "+onExport("pvc-replaced-orig")+" && mkdir "+onExport("pvc-replaced")+" && echo theirs > "+onExport("pvc-replaced/theirs"))
	err := deleteErr(c, t, v.VolumeId)
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "replaced") {
		t.Errorf("delete of a replaced directory: %v", err)
	}
	if !exists(onExport("pvc-replaced/theirs")) || !exists(onExport("pvc-replaced-orig")) {
		t.Error("a directory was touched")
	}
	lab.Sh(t, "rm -rf "+onExport("pvc-replaced")+" "+onExport("pvc-replaced-orig"))
	if err := deleteErr(c, t, v.VolumeId); err != nil {
		t.Errorf("delete once the directory is gone: %v", err)
	}
}
