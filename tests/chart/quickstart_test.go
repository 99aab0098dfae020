package chart

import (
	"os"
	"path"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/nfsdir/nfsdir/pkg/params"
	"github.com/nfsdir/nfsdir/pkg/subdir"
	"github.com/nfsdir/nfsdir/tests/docs/md"
)

// TestTheReadmesQuickStartWorks runs the README's quick start against the
// chart: its helm command, rendered with exactly the values it sets, gives
// the StorageClass its claim names (nfsdir's, with the server, share and
// subDir it sets, parameters the driver accepts), the claim is a valid
// PersistentVolumeClaim, and the directory the README says the claim
// binds to is the one the class's subDir template makes for it.
func TestTheReadmesQuickStartWorks(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	section, ok := md.Section(string(b), "Quick start")
	if !ok {
		t.Fatal("README.md has no Quick start section")
	}
	block, ok := firstShellBlock(section)
	if !ok {
		t.Fatal("the quick start has no ```sh block")
	}
	install, manifest := splitQuickStart(t, block)
	release, sets := helmInstallArgs(t, install)
	r := render(t, release, sets)

	var pvc corev1.PersistentVolumeClaim
	strictDecode(t, []byte(manifest), &pvc)
	if pvc.Spec.StorageClassName == nil {
		t.Fatal("the quick start's claim names no StorageClass")
	}
	var class *params.Create
	var share string
	for _, sc := range r.classes {
		if sc.Name != *pvc.Spec.StorageClassName {
			continue
		}
		if sc.Provisioner != "nfsdir.csi.io" {
			t.Errorf("StorageClass %s: provisioner %q", sc.Name, sc.Provisioner)
		}
		p := map[string]string{}
		for k, v := range sc.Parameters {
			p[k] = v
		}
		p[params.KeyPVName] = "pvc-0000"
		p[params.KeyPVCName], p[params.KeyPVCNamespace] = pvc.Name, pvc.Namespace
		cp, err := params.ParseCreate(p, nil)
		if err != nil {
			t.Fatalf("the driver refuses the quick start's StorageClass %s: %v", sc.Name, err)
		}
		class, share = &cp, sc.Parameters["share"]
	}
	if class == nil {
		t.Fatalf("helm renders no StorageClass %q for the quick start's claim (classes: %d)", *pvc.Spec.StorageClassName, len(r.classes))
	}
	dir, err := subdir.Expand(class.SubDir, subdir.Vars{PVCName: pvc.Name, PVCNamespace: pvc.Namespace, PVName: "pvc-0000"})
	if err != nil {
		t.Fatal(err)
	}
	claimed := regexp.MustCompile("binds to `([^`]+)`").FindStringSubmatch(section)
	if claimed == nil {
		t.Fatal("the quick start no longer says where the claim binds")
	}
	if want := path.Join(share, dir); claimed[1] != want {
		t.Errorf("the README says the claim binds to %s; the class makes %s", claimed[1], want)
	}
}

// firstShellBlock returns the first ```sh block of text.
func firstShellBlock(text string) (string, bool) {
	_, rest, ok := strings.Cut(text, "```sh\n")
	if !ok {
		return "", false
	}
	block, _, ok := strings.Cut(rest, "\n```")
	return block, ok
}

// splitQuickStart returns the quick start's helm install command (its
// continuation lines joined) and the manifest its kubectl apply reads
// from a here-document.
func splitQuickStart(t *testing.T, block string) (install, manifest string) {
	cmd, doc, ok := strings.Cut(block, "kubectl apply -f - <<'EOF'\n")
	if !ok {
		t.Fatalf("the quick start applies no here-document:\n%s", block)
	}
	manifest, _, ok = strings.Cut(doc, "\nEOF")
	if !ok {
		t.Fatalf("the here-document does not end:\n%s", doc)
	}
	return strings.ReplaceAll(cmd, "\\\n", " "), manifest
}

// helmInstallArgs returns the release and the --set values of a
// `helm install RELEASE charts/nfsdir ...` command.
func helmInstallArgs(t *testing.T, cmd string) (string, []string) {
	f := strings.Fields(cmd)
	if len(f) < 4 || f[0] != "helm" || f[1] != "install" || f[3] != "charts/nfsdir" {
		t.Fatalf("not a helm install of charts/nfsdir: %s", cmd)
	}
	var sets []string
	for i := 4; i < len(f); i++ {
		if f[i] == "--set" && i+1 < len(f) {
			sets = append(sets, strings.Trim(f[i+1], "'"))
			i++
		}
	}
	return f[2], sets
}
