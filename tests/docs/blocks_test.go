package docs

import (
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/nfsdir/nfsdir/tests/docs/md"
)

// runsBlock matches a test's call that runs a page's marked block, with
// the page and the name written out: c.runDoc(page, name, helmArgs...) in
// the Kubernetes lab, runDoc(t, page, name) here.
var runsBlock = regexp.MustCompile(`runDoc\((?:t, )?"([^"]+)", "([^"]+)"`)

// TestMarkedBlocksRun: every block a page marks as one that runs
// (`<!-- runs in a test: NAME -->` before its fence) is a shell or YAML
// block that a test of tests/ runs by its page and name, and every block
// those tests run is marked on its page: what a page tells a user to type
// is what a test types.
func TestMarkedBlocksRun(t *testing.T) {
	type ref struct{ page, mark string }
	marked := map[ref]int{} // the marker's line
	for _, p := range pages(t) {
		for _, b := range md.Blocks(read(t, p)) {
			key := ref{p, b.Mark}
			if _, dup := marked[key]; dup {
				t.Errorf("%s:%d: a second block marked %q", p, b.Line, b.Mark)
			}
			marked[key] = b.Line
			if !slices.Contains([]string{"sh", "bash", "yaml"}, b.Lang) {
				t.Errorf("%s:%d: marker %q is not before a sh, bash or yaml block", p, b.Line, b.Mark)
			}
		}
	}
	run := map[ref]string{} // the test file
	err := filepath.WalkDir(filepath.Join(root, "tests"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(path) != ".go" {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		for _, m := range runsBlock.FindAllStringSubmatch(string(b), -1) {
			run[ref{m[1], m[2]}] = rel
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for key, line := range marked {
		if _, ok := run[key]; !ok {
			t.Errorf("%s:%d: the marked block %s runs in no test", key.page, line, key.mark)
		}
	}
	for key, file := range run {
		if _, ok := marked[key]; !ok {
			t.Errorf("%s runs block %s of %s, which the page does not mark", file, key.mark, key.page)
		}
	}
	t.Logf("%d marked blocks, each run by a test", len(marked))
}

// runDoc runs page's shell block marked mark with bash, as written, in a
// new directory, and returns the directory.
func runDoc(t *testing.T, page, mark string) string {
	t.Helper()
	for _, b := range md.Blocks(read(t, page)) {
		if b.Mark != mark {
			continue
		}
		if b.Lang != "sh" && b.Lang != "bash" {
			t.Fatalf("%s:%d: block %s is %q, not a shell block", page, b.Line, mark, b.Lang)
		}
		dir := t.TempDir()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", "-e", "-o", "pipefail", "-c", b.Body)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s, block %s: %v\n%s", page, mark, err, out)
		}
		return dir
	}
	t.Fatalf("%s has no block marked %q", page, mark)
	return ""
}
