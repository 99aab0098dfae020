// Package storagee2e builds the lab's e2e.test: Kubernetes' e2e framework
// (k8s.io/kubernetes/test/e2e) with, of all its tests, only the storage
// tests of external drivers (test/e2e/storage/external), the ones the lab
// runs against nfsdir with --storage.testdriver. Their specs, names and
// flags are those of the whole e2e.test; leaving out every other SIG's
// tests makes it build and link in a fraction of the time.
package storagee2e

import (
	"flag"
	"os"
	"testing"

	"k8s.io/kubernetes/test/e2e"
	"k8s.io/kubernetes/test/e2e/framework"
	"k8s.io/kubernetes/test/e2e/framework/config"
	"k8s.io/kubernetes/test/e2e/framework/testfiles"
	manifests "k8s.io/kubernetes/test/e2e/testing-manifests"
	fixtures "k8s.io/kubernetes/test/fixtures"

	// The feature and label constants, frozen before the specs are
	// defined.
	_ "k8s.io/kubernetes/test/e2e/feature"
	// The specs: every storage test suite for each --storage.testdriver.
	_ "k8s.io/kubernetes/test/e2e/storage/external"

	// What the whole e2e.test sets up in the framework besides its tests:
	// failure dumps, metrics gathering, node checks and object formatting.
	_ "k8s.io/kubernetes/test/e2e/framework/debug/init"
	_ "k8s.io/kubernetes/test/e2e/framework/metrics/init"
	_ "k8s.io/kubernetes/test/e2e/framework/node/init"
	_ "k8s.io/kubernetes/test/utils/format"
)

func TestMain(m *testing.M) {
	config.CopyFlags(config.Flags, flag.CommandLine)
	framework.RegisterCommonFlags(flag.CommandLine)
	framework.RegisterClusterFlags(flag.CommandLine)
	flag.Parse()
	if flag.NArg() > 0 {
		os.Stderr.WriteString("storagee2e: unexpected arguments\n")
		os.Exit(2)
	}
	// The manifests and fixtures the suites read, from the binary itself.
	testfiles.AddFileSource(manifests.GetE2ETestingManifestsFS())
	testfiles.AddFileSource(fixtures.GetTestFixturesFS())
	framework.AfterReadingAllFlags(&framework.TestContext)
	// Files named by the driver definition (its StorageClass and
	// VolumeAttributesClass files), by an absolute path or one below
	// --repo-root.
	if framework.TestContext.RepoRoot != "" {
		testfiles.AddFileSource(testfiles.RootFileSource{Root: framework.TestContext.RepoRoot})
	}
	os.Exit(m.Run())
}

func TestStorageE2E(t *testing.T) {
	e2e.RunE2ETests(t)
}
