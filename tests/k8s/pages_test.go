package k8s

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A page's block marked `<!-- runs in a test: NAME -->` runs here as a
// user would run it from the page (tests/docs checks that every marked
// block runs in a test). The payload's pages directory holds README.md and
// docs/.

// labForPages puts the lab's NFS server in place of the pages' example
// one: the two things a user changes in every block.
var labForPages = strings.NewReplacer("nfs.example.com", nodeIP, "/srv/k8s", "/")

// docBlock returns the language and the text of page's block marked mark.
func (c *cluster) docBlock(page, mark string) (string, string) {
	b, err := os.ReadFile(filepath.Join(c.bin, "pages", page))
	if err != nil {
		c.t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	for i, l := range lines {
		if strings.TrimSpace(l) != "<!-- runs in a test: "+mark+" -->" || i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "```") {
			continue
		}
		for j := i + 2; j < len(lines); j++ {
			if strings.HasPrefix(lines[j], "```") {
				return strings.TrimPrefix(lines[i+1], "```"), strings.Join(lines[i+2:j], "\n") + "\n"
			}
		}
	}
	c.t.Fatalf("%s has no block marked %q", page, mark)
	return "", ""
}

// runDoc runs page's block marked mark with /bin/sh, with helm and
// kubectl on the PATH and the cluster's kubeconfig, in a directory where
// charts/nfsdir is the chart, as from a clone of the repository; a YAML
// block goes to `kubectl apply -f -`. Each helm command of the block also
// gets helmArgs (the lab's images and pacing). It returns what the block
// printed.
func (c *cluster) runDoc(page, mark string, helmArgs ...string) string {
	c.t.Helper()
	lang, block := c.docBlock(page, mark)
	block = labForPages.Replace(block)
	if lang == "yaml" {
		block = "kubectl apply -f - <<'EOF'\n" + block + "EOF\n"
	}
	work := filepath.Join(c.dir, "pages-"+mark)
	if err := os.MkdirAll(work, 0o755); err != nil {
		c.t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(c.bin, "chart"), filepath.Join(work, "charts")); err != nil && !os.IsExist(err) {
		c.t.Fatal(err)
	}
	quoted := make([]string, len(helmArgs))
	for i, a := range helmArgs {
		quoted[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	script := "set -e\nhelm() { command helm \"$@\" " + strings.Join(quoted, " ") + "; }\n" + block
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", script)
	cmd.Dir = work
	cmd.Env = append(c.toolEnv(), "PATH="+c.bin+":"+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		c.t.Fatalf("%s, block %s: %v\n%s\n%s", page, mark, err, block, out)
	}
	c.t.Logf("%s, block %s:\n%s", page, mark, out)
	return string(out)
}

// quickStartFromTheReadme installs nfsdir and makes its claim with the
// README's quick start (runDoc; helmArgs after the lab's values), and
// checks what the README says: the claim binds to default/shared-data on
// the share.
func (c *cluster) quickStartFromTheReadme(helmArgs ...string) {
	began := time.Now()
	out := c.runDoc("README.md", "quick-start", append(labImageValues(), helmArgs...)...)
	c.stage(fmt.Sprintf("the README's quick start returned after %.1fs", time.Since(began).Seconds()))
	if !strings.Contains(out, "STATUS: deployed") || !strings.Contains(out, "persistentvolumeclaim/shared-data created") {
		c.t.Fatalf("the README's quick start:\n%s", out)
	}
	c.driverRunning("driver running")
	c.boundPV("default", "shared-data")
	dir := filepath.Join(serverDir, "default", "shared-data")
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		c.t.Fatalf("the README's claim is not at default/shared-data on the share: %v", err)
	}
	c.stage("the README's claim bound, its directory " + dir)
}

// snapshotFromTheDocs: the snapshot and the restored claim of
// docs/snapshots.md, applied as the page shows them to the README's claim:
// the restored claim holds what the claim held when the snapshot was
// taken, not what it was changed to after.
func (c *cluster) snapshotFromTheDocs() {
	ctx := context.Background()
	defer c.dumpDriverOnFailure()
	src := filepath.Join(serverDir, "default", "shared-data", "notes")
	if err := os.WriteFile(src, []byte("before\n"), 0o644); err != nil {
		c.t.Fatal(err)
	}
	c.runDoc("docs/snapshots.md", "snapshot-and-restore")
	c.snapshotReady("data-before-upgrade")
	if err := os.WriteFile(src, []byte("after\n"), 0o644); err != nil {
		c.t.Fatal(err)
	}
	c.boundPV("default", "shared-data-restored")
	b, err := os.ReadFile(filepath.Join(serverDir, "default", "shared-data-restored", "notes"))
	if err != nil || string(b) != "before\n" {
		c.t.Fatalf("the claim restored from the snapshot holds %q, %v; want the data of the snapshot", b, err)
	}
	c.stage("the page's snapshot ready, its restored claim bound with the data of the snapshot")
	c.kube.CoreV1().PersistentVolumeClaims("default").Delete(ctx, "shared-data-restored", metav1.DeleteOptions{})
	c.dyn.Resource(resources["VolumeSnapshot"]).Namespace("default").Delete(ctx, "data-before-upgrade", metav1.DeleteOptions{})
}
