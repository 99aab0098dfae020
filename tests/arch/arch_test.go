// Package arch enforces the dependency rule of the code base: pure logic
// packages import only the standard library (and each other), only
// csiserver imports gRPC and the CSI types, and only cmd and tests import
// csiserver.
package arch

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/nfsdir/nfsdir"

var pure = []string{"capacity", "config", "export", "fault", "mountopts", "mountsec", "mounttable", "params", "safepath", "subdir", "volumeid", "keylock", "version", "gidrange", "placement"}

func deps(t *testing.T, pkg string) []string {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", pkg).Output()
	if err != nil {
		t.Fatalf("go list %s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}

func TestPurePackagesImportNoThirdParty(t *testing.T) {
	for _, p := range pure {
		pkg := module + "/pkg/" + p
		for _, d := range deps(t, pkg) {
			if d == pkg {
				continue
			}
			ok := false
			for _, q := range pure {
				if d == module+"/pkg/"+q {
					ok = true
				}
			}
			if !ok {
				t.Errorf("pure package %s imports %s", p, d)
			}
		}
	}
}

// eachImport calls fn for every direct import of every package matching
// pattern.
func eachImport(t *testing.T, pattern string, fn func(pkg, imp string)) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", pattern).Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		for _, imp := range f[1:] {
			fn(f[0], imp)
		}
	}
}

func TestOnlyCSIServerImportsGRPC(t *testing.T) {
	eachImport(t, module+"/pkg/...", func(pkg, imp string) {
		grpc := strings.HasPrefix(imp, "google.golang.org/grpc") || strings.HasPrefix(imp, "github.com/container-storage-interface/")
		if grpc && pkg != module+"/pkg/csiserver" && pkg != module+"/pkg/serveragent" && pkg != module+"/pkg/grpcstatus" {
			t.Errorf("%s imports %s; only pkg/csiserver, pkg/serveragent and pkg/grpcstatus may", pkg, imp)
		}
		if imp == module+"/pkg/csiserver" {
			t.Errorf("%s imports csiserver; only cmd and tests may", pkg)
		}
	})
}

// TestSharesHaveOneOwner: the controller's life with a share (its kept
// mounts, Areas, purges, stale-handle retry, options registry, volume IDs)
// has one owner, pkg/shares; the gRPC layer and `nfsdir adopt` go through
// it, never around it to pkg/sharemount or a Purger of their own.
func TestSharesHaveOneOwner(t *testing.T) {
	eachImport(t, module+"/...", func(pkg, imp string) {
		if imp == module+"/pkg/sharemount" && pkg != module+"/pkg/shares" {
			t.Errorf("%s imports pkg/sharemount; only pkg/shares may", pkg)
		}
	})
	grep := exec.Command("grep", "-rln", "--include=*.go", "--exclude=*_test.go", "NewPurger(", "../../pkg", "../../cmd")
	b, _ := grep.Output()
	for _, f := range strings.Fields(string(b)) {
		if !strings.HasSuffix(f, "pkg/shares/shares.go") && !strings.HasSuffix(f, "pkg/provision/purge.go") {
			t.Errorf("%s makes a Purger; only pkg/shares may", f)
		}
	}
}

// TestOnlyKubeapiTalksToKubernetes: the Kubernetes API has one owner,
// pkg/kubeapi (its dynamic client keeps every API group's typed client
// out of the binary); the rest see typed objects and small interfaces.
func TestOnlyKubeapiTalksToKubernetes(t *testing.T) {
	eachImport(t, module+"/...", func(pkg, imp string) {
		if strings.HasPrefix(imp, "k8s.io/client-go") && !strings.HasPrefix(pkg, module+"/pkg/kubeapi") {
			t.Errorf("%s imports %s; only pkg/kubeapi may", pkg, imp)
		}
	})
}
