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
// in testdata/storage-e2e-driver.yaml, on a cluster of its own (make
// e2e-storage; make e2e ends with the quick selection on its cluster).
func TestKubernetesStorageSuite(t *testing.T) {
	if os.Getenv("NFSDIR_LAB") != "1" || os.Getenv("NFSDIR_E2E_STORAGE") != "1" {
		t.Skip("runs in the lab guest: make e2e-storage")
	}
	c := startCluster(t)
	c.tagE2EImages()
	c.startNFSServer(false)
	c.installDriver("--set", "feature.enableInlineVolume=true")
	c.storageSuite(suiteRunFromEnv())
}

// suiteRunFromEnv is the selection make e2e-storage asks for: the suite's
// specs for nfsdir (NFSDIR_E2E_FOCUS / NFSDIR_E2E_SKIP replace the
// defaults, NFSDIR_E2E_QUICK=1 narrows them to quickSpecs),
// NFSDIR_E2E_PROCS at a time for at most NFSDIR_E2E_MINUTES, NFSDIR_E2E_REPEAT
// more times.
func suiteRunFromEnv() suiteRun {
	r := suiteRun{Focus: suiteFocus, Skip: suiteSkip, Procs: 3, Limit: 50 * time.Minute}
	if f := os.Getenv("NFSDIR_E2E_FOCUS"); f != "" {
		r.Focus = f
	}
	if s := os.Getenv("NFSDIR_E2E_SKIP"); s != "" {
		r.Skip = s
	}
	if os.Getenv("NFSDIR_E2E_QUICK") == "1" {
		r.Focus, r.Skip = quickSelection(r.Focus, r.Skip)
	}
	if n, err := strconv.Atoi(os.Getenv("NFSDIR_E2E_PROCS")); err == nil && n > 0 {
		r.Procs = n
	}
	if n, err := strconv.Atoi(os.Getenv("NFSDIR_E2E_REPEAT")); err == nil && n > 0 {
		r.Repeat = n
	}
	if m, err := strconv.Atoi(os.Getenv("NFSDIR_E2E_MINUTES")); err == nil && m > 0 {
		r.Limit = time.Duration(m) * time.Minute
	}
	return r
}

// quickStorageSuite is make e2e's last step: the quick selection of the
// storage suite on the scenarios' cluster.
func (c *cluster) quickStorageSuite() {
	r := suiteRun{Procs: 3, Limit: 30 * time.Minute}
	r.Focus, r.Skip = quickSelection(suiteFocus, suiteSkip)
	c.storageSuite(r)
}

// storageSuite readies the cluster for the suite's selection r (its
// images, the inline volume's directory, inline volumes enabled) and runs
// it.
func (c *cluster) storageSuite(r suiteRun) {
	c.tagE2EImages()
	// The directory the declared inline ephemeral volume mounts: nfsdir
	// mounts an inline volume's directory, it never creates one.
	sh(c.t, "mkdir -p -m 0777 "+filepath.Join(serverDir, inlineDir))
	d, err := c.kube.StorageV1().CSIDrivers().Get(context.Background(), driverName, metav1GetOptions)
	if err != nil {
		c.t.Fatal(err)
	}
	if !slices.Contains(d.Spec.VolumeLifecycleModes, "Ephemeral") {
		c.helm("upgrade", release, filepath.Join(c.bin, "chart", "nfsdir"), "--namespace", driverNS, "--reuse-values",
			"--set", "feature.enableInlineVolume=true")
		c.driverRunning("driver with inline volumes running")
	}
	c.runStorageSuite(r)
}

// tagE2EImages tags the lab's images with the names the storage suite's
// pods use, on this guest's containerd.
func (c *cluster) tagE2EImages() {
	for name, from := range e2eImages {
		c.ctr("-n", "k8s.io", "images", "tag", "--force", from, name)
	}
}

// runStorageSuite has the host run the storage suite's selection r
// (serveSuiteRuns) and checks its outcome: it fails the test when a spec
// failed or none passed, and returns the run's summary.
func (c *cluster) runStorageSuite(r suiteRun) suiteSummary {
	t := c.t
	sum, err := c.askHost(r)
	c.stage("storage e2e suite finished")
	t.Logf("storage e2e suite: ran %d of %d specs: %d passed, %d failed, %d pending, %d skipped",
		sum.Ran, sum.Total, sum.Passed, sum.Failed, sum.Pending, sum.Skipped)
	reasons := slices.SortedFunc(maps.Keys(sum.SkipReasons), func(a, b string) int {
		return cmp.Or(sum.SkipReasons[b]-sum.SkipReasons[a], strings.Compare(a, b))
	})
	for _, r := range reasons {
		t.Logf("skipped at run time: %3d × %s", sum.SkipReasons[r], r)
	}
	if sum.Total == 0 {
		t.Fatalf("the suite printed no summary (exit: %v)", err)
	}
	if sum.Failed > 0 || err != nil {
		t.Errorf("the storage e2e suite failed: %d failed specs (exit: %v); the full output and JUnit report are in the host's report directory", sum.Failed, err)
	}
	if sum.Passed == 0 {
		t.Error("no spec of the storage e2e suite passed")
	}
	return sum
}

// execSuite runs the storage suite's selection r with the Ginkgo CLI and
// e2e.test in bin against the cluster of kubeconfig, with its report,
// full output and driver definition in report, and a line per finished
// spec on progress.
func execSuite(ctx context.Context, bin, kubeconfig, report string, r suiteRun, progress io.Writer) (suiteSummary, error) {
	if err := os.MkdirAll(report, 0o755); err != nil {
		return suiteSummary{}, err
	}
	// The driver definition names its class files by their path in the
	// guest (/work/pkg is this package's directory there).
	def, err := os.ReadFile(filepath.Join("testdata", "storage-e2e-driver.yaml"))
	if err != nil {
		return suiteSummary{}, err
	}
	here, err := filepath.Abs(".")
	if err != nil {
		return suiteSummary{}, err
	}
	driverDef := filepath.Join(report, "storage-e2e-driver.yaml")
	if err := os.WriteFile(driverDef, []byte(strings.ReplaceAll(string(def), "/work/pkg/", here+"/")), 0o644); err != nil {
		return suiteSummary{}, err
	}
	// Ginkgo stops at the limit and reports; the context is the backstop.
	ctx, cancel := context.WithTimeout(ctx, r.budget()+5*time.Minute)
	defer cancel()
	// The Ginkgo CLI runs the specs in parallel processes of e2e.test: a
	// spec mostly waits for pods, so a few run side by side.
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "ginkgo"),
		"--procs="+strconv.Itoa(r.Procs), "-v", "--no-color", "--timeout="+r.Limit.String(), "--repeat="+strconv.Itoa(r.Repeat),
		"--focus="+r.Focus, "--skip="+r.Skip, "--junit-report="+filepath.Join(report, "junit.xml"),
		filepath.Join(bin, "e2e.test"), "--",
		"--kubeconfig="+kubeconfig, "--provider=local", "--storage.testdriver="+driverDef, "--report-dir="+report,
		"--node-os-distro=debian", "--non-blocking-taints=node-role.kubernetes.io/control-plane")
	cmd.Dir = report
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "HOME="+report, "PATH="+bin+":"+os.Getenv("PATH"))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return suiteSummary{}, err
	}
	cmd.Stderr = cmd.Stdout
	full, err := os.Create(filepath.Join(report, "suite.log"))
	if err != nil {
		return suiteSummary{}, err
	}
	defer full.Close()
	if err := cmd.Start(); err != nil {
		return suiteSummary{}, err
	}
	sum := scanSuiteOutput(stdout, full, progress)
	return sum, cmd.Wait()
}

// suiteSummary is the last summary a Ginkgo run printed, with the reasons
// given for the specs skipped at run time.
type suiteSummary struct {
	Ran, Total, Passed, Failed, Pending, Skipped int
	SkipReasons                                  map[string]int // reason → specs
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
	s := suiteSummary{SkipReasons: map[string]int{}}
	atoi := func(x string) int { n, _ := strconv.Atoi(x); return n }
	var result, text, reason string
	flush := func() {
		if strings.HasPrefix(result, "S [SKIPPED]") && text != "" {
			s.SkipReasons[reason]++
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
			s.Ran, s.Total = atoi(m[1]), atoi(m[2])
			fmt.Fprintln(progress, line)
		}
		if m := countsLine.FindStringSubmatch(line); m != nil {
			s.Passed, s.Failed, s.Pending, s.Skipped = atoi(m[1]), atoi(m[2]), atoi(m[3]), atoi(m[4])
			fmt.Fprintln(progress, line)
		}
	}
	flush()
	return s
}
