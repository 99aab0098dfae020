package k8s

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// e2eImages are the images the Kubernetes v1.35 storage suite names
// (test/utils/image/manifest.go), tagged onto the lab's own: busybox from
// Debian's busybox-static, and agnhost built from the same Kubernetes
// module (make k8s-e2e-bins) with busybox beside it.
var e2eImages = map[string]string{
	"registry.k8s.io/e2e-test-images/busybox:1.37.0-1": "lab.local/busybox:lab",
	"registry.k8s.io/pause:3.10.1":                     "lab.local/pause:3.10",
	// The exec test copies /bin/ls onto the volume and runs it there;
	// busybox's ls does that as well as nginx's image does.
	"registry.k8s.io/e2e-test-images/nginx:1.14-4": "lab.local/busybox:lab",
}

// Defaults of the storage suite's selection; NFSDIR_E2E_FOCUS and
// NFSDIR_E2E_SKIP replace them.
const (
	suiteFocus = `External.Storage.*nfsdir\.csi\.io`
	// Disruptive and Serial tests restart the kubelet or need the cluster
	// to themselves; Feature tests need alpha features this cluster does
	// not enable.
	suiteSkip = `\[Disruptive\]|\[Serial\]|\[Feature:`
)

// TestKubernetesStorageSuite runs Kubernetes' own storage e2e suite
// (e2e.test of k8s.io/kubernetes v1.35.4 with test/e2e/storage/external)
// against nfsdir installed with the chart, with the capabilities declared
// in testdata/storage-e2e-driver.yaml (make e2e-storage).
func TestKubernetesStorageSuite(t *testing.T) {
	if os.Getenv("NFSDIR_LAB") != "1" || os.Getenv("NFSDIR_E2E_STORAGE") != "1" {
		t.Skip("runs in the lab guest: make e2e-storage")
	}
	c := startCluster(t)
	for name, from := range e2eImages {
		c.ctr("-n", "k8s.io", "images", "tag", from, name)
	}
	c.startNFSServer()
	c.installDriver()

	focus, skip := suiteFocus, suiteSkip
	if f := os.Getenv("NFSDIR_E2E_FOCUS"); f != "" {
		focus = f
	}
	if s := os.Getenv("NFSDIR_E2E_SKIP"); s != "" {
		skip = s
	}
	report := "/out/storage-e2e"
	os.MkdirAll(report, 0o755)
	driverDef, _ := filepath.Abs(filepath.Join("testdata", "storage-e2e-driver.yaml"))
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, "e2e.test"),
		"--kubeconfig="+c.admin, "--provider=local", "--storage.testdriver="+driverDef,
		"--ginkgo.focus="+focus, "--ginkgo.skip="+skip, "--ginkgo.no-color", "--ginkgo.timeout=150m",
		"--ginkgo.junit-report="+filepath.Join(report, "junit.xml"), "--report-dir="+report,
		"--node-os-distro=debian", "--non-blocking-taints=node-role.kubernetes.io/control-plane")
	cmd.Dir = c.dir
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.admin, "HOME="+c.dir)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	began := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sum := scanSuiteOutput(stdout, os.Stdout)
	err = cmd.Wait()
	c.stage("storage e2e suite finished after " + time.Since(began).Round(time.Second).String())
	t.Logf("storage e2e suite: ran %d of %d specs: %d passed, %d failed, %d pending, %d skipped",
		sum.ran, sum.total, sum.passed, sum.failed, sum.pending, sum.skipped)
	if sum.total == 0 {
		t.Fatalf("the suite printed no summary (exit: %v)", err)
	}
	if sum.failed > 0 || err != nil {
		t.Errorf("the storage e2e suite failed: %d failed specs (exit: %v); JUnit report in %s", sum.failed, err, report)
	}
	if sum.passed == 0 {
		t.Error("no spec of the storage e2e suite passed")
	}
}

// suiteSummary is the last summary a Ginkgo run printed.
type suiteSummary struct{ ran, total, passed, failed, pending, skipped int }

var (
	ranLine    = regexp.MustCompile(`Ran (\d+) of (\d+) Specs`)
	countsLine = regexp.MustCompile(`(\d+) Passed \| (\d+) Failed \| (\d+) Pending \| (\d+) Skipped`)
)

// scanSuiteOutput copies a Ginkgo run's output to w and picks up its
// summary lines.
func scanSuiteOutput(r io.Reader, w io.Writer) suiteSummary {
	var s suiteSummary
	atoi := func(x string) int { n, _ := strconv.Atoi(x); return n }
	// Ginkgo marks finished specs with characters on one long line: copy
	// the output as it comes, and scan a copy for the summary.
	sc := bufio.NewScanner(io.TeeReader(r, w))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := ranLine.FindStringSubmatch(line); m != nil {
			s.ran, s.total = atoi(m[1]), atoi(m[2])
		}
		if m := countsLine.FindStringSubmatch(line); m != nil {
			s.passed, s.failed, s.pending, s.skipped = atoi(m[1]), atoi(m[2]), atoi(m[3]), atoi(m[4])
		}
	}
	return s
}
