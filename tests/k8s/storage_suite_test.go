package k8s

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
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
	// The multiVolume tests' pods sleep in a shell and check the volume
	// with dd, base64 and sha256sum, all of which busybox has.
	"registry.k8s.io/e2e-test-images/jessie-dnsutils:1.7": "lab.local/busybox:lab",
}

// inlineDir is the directory on the export that the CSI inline ephemeral
// volume of testdata/storage-e2e-driver.yaml names.
const inlineDir = "e2e-inline"

// Defaults of the storage suite's selection; NFSDIR_E2E_FOCUS and
// NFSDIR_E2E_SKIP replace them.
const (
	suiteFocus = `External.Storage.*nfsdir\.csi\.io`
	// Disruptive and Serial tests restart the kubelet or need the cluster
	// to themselves, Flaky ones are known to fail by themselves (the
	// recovery from an invalid VolumeAttributesClass, external-resizer
	// #483); the Feature tests left out need what the lab or nfsdir lacks
	// (Windows nodes, group snapshots, XFS, SELinux).
	suiteSkip = `\[Disruptive\]|\[Serial\]|\[Flaky\]|\[Feature:(Windows|volumegroupsnapshot|VolumeSourceXFS|SELinux)\]`
)

// quickSpecs are the storage suite's specs make test runs
// (NFSDIR_E2E_QUICK=1): one of each kind of spec that runs here, for each
// capability the driver file declares; a run of make e2e-storage alone
// runs all of them (67), which made make test outgrow CI's 90 minutes.
var quickSpecs = []string{
	`\(default fs\)\] volumes should store data`,
	`\(default fs\)\] volumes should allow exec of files on the volume`,
	`\(default fs\)\] provisioning should provision storage with mount options`,
	`\(default fs\)\] provisioning should provision storage with pvc data source$`,
	`\(default fs\)\] provisioning should provision storage with snapshot data source \[`,
	`\(default fs\)\] provisioning should mount multiple PV pointing to the same storage on the same node`,
	`\(default fs\)\] subPath should support existing directory$`,
	`fsgroupchangepolicy \(OnRootMismatch\)\[LinuxOnly\], pod created with an initial fsgroup, new pod fsgroup applied`,
	`read-write-once-pod should block a second pod`,
	`\(immediate-binding\)\] ephemeral should create read/write inline ephemeral volume`,
	`CSI Ephemeral-volume \(default fs\)\] ephemeral should create read/write inline ephemeral volume`,
	`volume-expand should resize volume when PVC is edited while pod is using it`,
	`volume-modify .*should modify volume with no VAC`,
	`Dynamic Snapshot \(delete policy\)\] snapshottable`,
	`Pre-provisioned Snapshot \(retain policy\)\] snapshottable`,
	`\(filesystem volmode\)\] volumeMode should not mount / map unused volumes`,
}

// quickSelection narrows the suite's selection to quickSpecs.
func quickSelection(focus, skip string) (string, string) {
	return focus + `.*(` + strings.Join(quickSpecs, "|") + `)`, skip + `|\[Slow\]`
}

// TestKubernetesStorageSuite runs Kubernetes' own storage e2e suite
// (e2e.test of k8s.io/kubernetes v1.35.4 with test/e2e/storage/external)
// against nfsdir installed with the chart, with the capabilities declared
// in testdata/storage-e2e-driver.yaml (make e2e-storage).
func TestKubernetesStorageSuite(t *testing.T) {
	if os.Getenv("NFSDIR_LAB") != "1" || os.Getenv("NFSDIR_E2E_STORAGE") != "1" {
		t.Skip("runs in the lab guest: make e2e-storage")
	}
	c := startCluster(t)
	c.tagE2EImages()
	c.startNFSServer(false)
	// The directory the declared inline ephemeral volume mounts: nfsdir
	// mounts an inline volume's directory, it never creates one.
	sh(t, "mkdir -m 0777 "+filepath.Join(serverDir, inlineDir))
	c.installDriver("--set", "feature.enableInlineVolume=true")

	focus, skip := suiteFocus, suiteSkip
	if f := os.Getenv("NFSDIR_E2E_FOCUS"); f != "" {
		focus = f
	}
	if s := os.Getenv("NFSDIR_E2E_SKIP"); s != "" {
		skip = s
	}
	if os.Getenv("NFSDIR_E2E_QUICK") == "1" {
		focus, skip = quickSelection(focus, skip)
	}
	procs := 3
	if n, err := strconv.Atoi(os.Getenv("NFSDIR_E2E_PROCS")); err == nil && n > 0 {
		procs = n
	}
	limit := 50 * time.Minute
	if m, err := strconv.Atoi(os.Getenv("NFSDIR_E2E_MINUTES")); err == nil && m > 0 {
		limit = time.Duration(m) * time.Minute
	}
	c.runStorageSuite(focus, skip, procs, limit, "/out/storage-e2e")
}

// tagE2EImages tags the lab's images with the names the storage suite's
// pods use, on this guest's containerd.
func (c *cluster) tagE2EImages() {
	for name, from := range e2eImages {
		c.ctr("-n", "k8s.io", "images", "tag", from, name)
	}
}

// runStorageSuite runs the storage suite's specs that match focus and not
// skip, procs at a time, for at most limit, with its report in dir; it
// fails the test when a spec fails or none passes, and returns the run's
// summary.
func (c *cluster) runStorageSuite(focus, skip string, procs int, limit time.Duration, report string) suiteSummary {
	t := c.t
	os.MkdirAll(report, 0o755)
	driverDef, _ := filepath.Abs(filepath.Join("testdata", "storage-e2e-driver.yaml"))
	// Ginkgo stops at limit and reports; the context is the backstop.
	ctx, cancel := context.WithTimeout(context.Background(), limit+5*time.Minute)
	defer cancel()
	// The Ginkgo CLI runs the specs in parallel processes of e2e.test: under
	// emulation a spec mostly waits for pods, so a few run side by side.
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, "ginkgo"),
		"--procs="+strconv.Itoa(procs), "-v", "--no-color", "--timeout="+limit.String(),
		"--focus="+focus, "--skip="+skip, "--junit-report="+filepath.Join(report, "junit.xml"),
		filepath.Join(c.bin, "e2e.test"), "--",
		"--kubeconfig="+c.admin, "--provider=local", "--storage.testdriver="+driverDef, "--report-dir="+report,
		"--node-os-distro=debian", "--non-blocking-taints=node-role.kubernetes.io/control-plane")
	cmd.Dir = c.dir
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.admin, "HOME="+c.dir, "PATH="+c.bin+":"+os.Getenv("PATH"))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	full, err := os.Create(filepath.Join(report, "suite.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer full.Close()
	began := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sum := scanSuiteOutput(stdout, full, os.Stdout)
	err = cmd.Wait()
	c.stage("storage e2e suite finished after " + time.Since(began).Round(time.Second).String())
	t.Logf("storage e2e suite: ran %d of %d specs: %d passed, %d failed, %d pending, %d skipped",
		sum.ran, sum.total, sum.passed, sum.failed, sum.pending, sum.skipped)
	reasons := slices.SortedFunc(maps.Keys(sum.skipReasons), func(a, b string) int {
		return cmp.Or(sum.skipReasons[b]-sum.skipReasons[a], strings.Compare(a, b))
	})
	for _, r := range reasons {
		t.Logf("skipped at run time: %3d × %s", sum.skipReasons[r], r)
	}
	if sum.total == 0 {
		t.Fatalf("the suite printed no summary (exit: %v)", err)
	}
	if sum.failed > 0 || err != nil {
		t.Errorf("the storage e2e suite failed: %d failed specs (exit: %v); full output and JUnit report in %s", sum.failed, err, report)
	}
	if sum.passed == 0 {
		t.Error("no spec of the storage e2e suite passed")
	}
	return sum
}

// suiteSummary is the last summary a Ginkgo run printed, with the reasons
// given for the specs skipped at run time.
type suiteSummary struct {
	ran, total, passed, failed, pending, skipped int
	skipReasons                                  map[string]int // reason → specs
}

var (
	ranLine    = regexp.MustCompile(`Ran (\d+) of (\d+) Specs`)
	countsLine = regexp.MustCompile(`(\d+) Passed \| (\d+) Failed \| (\d+) Pending \| (\d+) Skipped`)
)

// A verbose Ginkgo report of one spec sits between separator lines: its
// text, its location, a result line and, for skips and failures, the
// reason.
const specSeparator = "------------------------------"

var (
	resultLine = regexp.MustCompile(`^(• \[|S \[SKIPPED\]|• \[FAILED\]|\[FAILED\]|• \[PANICKED\]|• \[TIMEDOUT\]|P \[PENDING\])`)
	reasonLine = regexp.MustCompile(`^\s+\[(SKIPPED|FAILED|PANICKED|TIMEDOUT)\] (.*)`)
	// In a spec's timeline the same marker only says where it happened;
	// the reason follows after the timeline.
	timelineMark = regexp.MustCompile(`^\s+\[[A-Z]+\] in \[[A-Za-z]+\] - `)
)

// scanSuiteOutput copies a verbose Ginkgo run's output to full, writes one
// line per finished spec (result, text and any skip or failure reason) to
// progress, and picks up the run's summary.
func scanSuiteOutput(r io.Reader, full, progress io.Writer) suiteSummary {
	s := suiteSummary{skipReasons: map[string]int{}}
	atoi := func(x string) int { n, _ := strconv.Atoi(x); return n }
	var result, text, reason string
	flush := func() {
		if strings.HasPrefix(result, "S [SKIPPED]") && text != "" {
			s.skipReasons[reason]++
		}
		if result != "" && text != "" {
			line := result + " " + text
			if reason != "" {
				line += " -- " + reason
			}
			fmt.Fprintln(progress, line)
		}
		result, text, reason = "", "", ""
	}
	sc := bufio.NewScanner(io.TeeReader(r, full))
	sc.Buffer(make([]byte, 1<<20), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == specSeparator:
			flush()
		case resultLine.MatchString(line):
			result = strings.TrimSpace(line)
		case strings.HasPrefix(line, "External Storage ") && text == "":
			text = line
		case reason == "" && reasonLine.MatchString(line) && !timelineMark.MatchString(line):
			reason = strings.TrimSpace(reasonLine.FindStringSubmatch(line)[2])
		}
		if m := ranLine.FindStringSubmatch(line); m != nil {
			flush()
			s.ran, s.total = atoi(m[1]), atoi(m[2])
			fmt.Fprintln(progress, line)
		}
		if m := countsLine.FindStringSubmatch(line); m != nil {
			s.passed, s.failed, s.pending, s.skipped = atoi(m[1]), atoi(m[2]), atoi(m[3]), atoi(m[4])
			fmt.Fprintln(progress, line)
		}
	}
	flush()
	return s
}
