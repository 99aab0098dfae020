package k8s

import (
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// suiteOutput is a verbose Ginkgo run in the shape e2e.test prints it: a
// spec that passed, one skipped at run time, one that failed, and the
// summary.
const suiteOutput = `Will run 3 of 7673 specs
------------------------------
[SynchronizedBeforeSuite] PASSED [12.001 seconds]
------------------------------
SSSSSSSS
------------------------------
• [95.310 seconds]
External Storage [Driver: nfsdir.csi.io] [Testpattern: Dynamic PV (default fs)] volumes should store data
k8s.io/kubernetes@v1.35.4/test/e2e/storage/testsuites/volumes.go:196

  Timeline >>
  STEP: Creating a kubernetes client @ 11/30/26 04:10:00.000
  << Timeline
------------------------------
S [SKIPPED] [0.002 seconds]
External Storage [Driver: nfsdir.csi.io] [Testpattern: Dynamic PV (block volmode)] volumes should store data
k8s.io/kubernetes@v1.35.4/test/e2e/storage/testsuites/volumes.go:196

  Timeline >>
  [SKIPPED] in [BeforeEach] - k8s.io/kubernetes@v1.35.4/test/e2e/storage/framework/testsuite.go:116 @ 11/30/26 04:06:28.099
  << Timeline

  [SKIPPED] Driver nfsdir.csi.io doesn't support Block -- skipping
  In [BeforeEach] at: k8s.io/kubernetes@v1.35.4/test/e2e/storage/framework/testsuite.go:116
------------------------------
SSS
------------------------------
• [FAILED] [300.120 seconds]
External Storage [Driver: nfsdir.csi.io] [Testpattern: Dynamic PV (default fs)] volumes should allow exec of files on the volume
k8s.io/kubernetes@v1.35.4/test/e2e/storage/testsuites/volumes.go:207

  [FAILED] pod "exec-volume-test" did not start in time
  In [It] at: k8s.io/kubernetes@v1.35.4/test/e2e/framework/pod/output/output.go:263
------------------------------

Ran 2 of 7673 Specs in 400.102 seconds
FAIL! -- 1 Passed | 1 Failed | 0 Pending | 7671 Skipped
`

// TestScanSuiteOutput reads the summary of a Ginkgo run out of its output,
// passes the output through unchanged and reports one line per spec.
func TestScanSuiteOutput(t *testing.T) {
	var full, progress strings.Builder
	got := scanSuiteOutput(strings.NewReader(suiteOutput), &full, &progress)
	want := suiteSummary{Ran: 2, Total: 7673, Passed: 1, Failed: 1, Pending: 0, Skipped: 7671,
		SkipReasons: map[string]int{"Driver nfsdir.csi.io doesn't support Block -- skipping": 1}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("summary = %+v, want %+v", got, want)
	}
	if full.String() != suiteOutput {
		t.Errorf("output not passed through: %q", full.String())
	}
	wantProgress := `• [95.310 seconds] External Storage [Driver: nfsdir.csi.io] [Testpattern: Dynamic PV (default fs)] volumes should store data
S [SKIPPED] [0.002 seconds] External Storage [Driver: nfsdir.csi.io] [Testpattern: Dynamic PV (block volmode)] volumes should store data -- Driver nfsdir.csi.io doesn't support Block -- skipping
• [FAILED] [300.120 seconds] External Storage [Driver: nfsdir.csi.io] [Testpattern: Dynamic PV (default fs)] volumes should allow exec of files on the volume -- pod "exec-volume-test" did not start in time
Ran 2 of 7673 Specs in 400.102 seconds
FAIL! -- 1 Passed | 1 Failed | 0 Pending | 7671 Skipped
`
	if progress.String() != wantProgress {
		t.Errorf("progress:\n%s\nwant:\n%s", progress.String(), wantProgress)
	}
}

// TestQuickSelection: make test's selection keeps one spec of each kind
// and leaves out their variants and the [Slow] specs.
func TestQuickSelection(t *testing.T) {
	f, k := quickSelection(suiteFocus, suiteSkip)
	focus, skip := regexp.MustCompile(f), regexp.MustCompile(k)
	runs := func(spec string) bool { return focus.MatchString(spec) && !skip.MatchString(spec) }
	const p = "External Storage [Driver: nfsdir.csi.io] [Testpattern: "
	for _, kept := range []string{
		p + "Dynamic PV (default fs)] subPath should support existing directory",
		p + "Dynamic PV (default fs)] provisioning should provision storage with pvc data source",
		p + "Generic Ephemeral-volume (default fs) (immediate-binding)] ephemeral should create read/write inline ephemeral volume",
		p + "Dynamic PV (default fs)] fsgroupchangepolicy (OnRootMismatch)[LinuxOnly], pod created with an initial fsgroup, new pod fsgroup applied to volume contents",
		p + "Dynamic Snapshot (delete policy)] snapshottable [Feature:VolumeSnapshotDataSource] volume snapshot controller  should check snapshot fields",
	} {
		if !runs(kept) {
			t.Errorf("the quick selection leaves out %q", kept)
		}
	}
	for _, left := range []string{
		p + "Dynamic PV (default fs)] provisioning should provision storage with pvc data source in parallel [Slow] [Slow]",
		p + "Dynamic PV (default fs)] subPath should support existing directories when readOnly specified in the volumeSource",
		p + "Generic Ephemeral-volume (default fs) (late-binding)] ephemeral should create read/write inline ephemeral volume",
		p + "Dynamic PV (default fs)] fsgroupchangepolicy (Always)[LinuxOnly], pod created with an initial fsgroup, volume contents ownership changed via chgrp in first pod, new pod with same fsgroup applied to the volume contents",
		p + "Dynamic PV (block volmode)] volumes should store data",
	} {
		if runs(left) {
			t.Errorf("the quick selection runs %q", left)
		}
	}
}
