package chart

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/nfsdir/nfsdir/pkg/params"
	"github.com/nfsdir/nfsdir/pkg/serveragent"
)

// TestManifestsMatchChart fails when deploy/nfsdir.yaml drifts from the
// chart: run `make manifests`.
func TestManifestsMatchChart(t *testing.T) {
	want, err := exec.Command(helm(t), "template", "nfsdir", chartDir, "--namespace", "kube-system").Output()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../../deploy/nfsdir.yaml")
	if err != nil {
		t.Fatal(err)
	}
	header := "# Rendered from charts/nfsdir by 'make manifests'; do not edit.\n"
	if string(got) != header+string(want) {
		t.Error("deploy/nfsdir.yaml differs from the chart's rendering: run `make manifests`")
	}
}

// TestExamples decodes every example strictly and checks that the driver's
// own parsers accept the StorageClass parameters and volume attributes.
func TestExamples(t *testing.T) {
	files, _ := filepath.Glob("../../deploy/example/*.yaml")
	sort.Strings(files)
	if len(files) < 6 {
		t.Fatalf("examples: %v", files)
	}
	kinds := map[string]int{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range strings.Split(string(b), "\n---") {
			var meta struct{ Kind string }
			if err := yaml.Unmarshal([]byte(doc), &meta); err != nil || meta.Kind == "" {
				t.Fatalf("%s: %v", f, err)
			}
			kinds[meta.Kind]++
			switch meta.Kind {
			case "StorageClass":
				var sc storagev1.StorageClass
				strictDecode(t, []byte(doc), &sc)
				p := map[string]string{params.KeyPVName: "pvc-1", params.KeyPVCName: "data", params.KeyPVCNamespace: "default"}
				for k, v := range sc.Parameters {
					p[k] = v
				}
				if _, err := params.ParseCreate(p, nil); err != nil || sc.Provisioner != "nfsdir.csi.io" {
					t.Errorf("%s: parameters rejected by the driver: %v", f, err)
				}
			case "PersistentVolume":
				var pv corev1.PersistentVolume
				strictDecode(t, []byte(doc), &pv)
				if _, err := params.ParseVolume(pv.Spec.CSI.VolumeAttributes); err != nil {
					t.Errorf("%s: attributes rejected by the driver: %v", f, err)
				}
			case "Pod":
				var pod corev1.Pod
				strictDecode(t, []byte(doc), &pod)
				for _, v := range pod.Spec.Volumes {
					if v.CSI != nil {
						if _, err := params.ParseVolume(v.CSI.VolumeAttributes); err != nil {
							t.Errorf("%s: inline attributes rejected by the driver: %v", f, err)
						}
					}
				}
			case "PersistentVolumeClaim":
				strictDecode(t, []byte(doc), &corev1.PersistentVolumeClaim{})
			case "Deployment":
				var d appsv1.Deployment
				strictDecode(t, []byte(doc), &d)
			case "Service":
				strictDecode(t, []byte(doc), &corev1.Service{})
			case "Certificate":
				checkCertificate(t, f, []byte(doc))
			default:
				t.Errorf("%s: unexpected kind %s", f, meta.Kind)
			}
		}
	}
	for _, k := range []string{"StorageClass", "PersistentVolumeClaim", "Deployment", "PersistentVolume", "Pod", "Service"} {
		if kinds[k] == 0 {
			t.Errorf("no example of a %s", k)
		}
	}
}

// TestDockerfile checks what can be checked without a Docker engine: every
// instruction is valid, the build is static with the same -X flags as
// `make build`, the binary built is the one copied and run, and the runtime
// stage is the root file system the lab's image is made of (the same
// script, tests/k8s/nfsdir-rootfs.sh) on scratch: no shell, no package
// manager, nothing the lab does not test.
func TestDockerfile(t *testing.T) {
	b, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(b), "\\\n", " ")
	valid := map[string]bool{"FROM": true, "ARG": true, "WORKDIR": true, "COPY": true, "RUN": true, "ENTRYPOINT": true, "ENV": true, "LABEL": true, "USER": true}
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	var build, copyBin, entry, rootfsRun, daemonsRun string
	var stages [][]string // each stage's instructions, metadata left out
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		instr := strings.Fields(line)[0]
		if !valid[instr] {
			t.Errorf("unknown instruction %q", instr)
		}
		if instr == "FROM" {
			stages = append(stages, nil)
		}
		if instr != "ARG" && instr != "LABEL" && len(stages) > 0 { // metadata: no content
			stages[len(stages)-1] = append(stages[len(stages)-1], line)
		}
		switch {
		case instr == "RUN" && strings.Contains(line, "tests/k8s/nfsdir-rootfs.sh"):
			rootfsRun = line
		case instr == "RUN" && strings.Contains(line, "tests/k8s/daemons-rootfs.sh"):
			daemonsRun = line
		case instr == "RUN" && strings.Contains(line, "go build"):
			build = line
		case instr == "COPY" && strings.Contains(line, "--from=build"):
			copyBin = line
		case instr == "ENTRYPOINT":
			entry = line
		}
	}
	if len(stages) != 5 {
		t.Fatalf("%d stages, want build, rootfs, daemons-rootfs, daemons and runtime", len(stages))
	}
	final, daemons := stages[4], stages[3]
	wantDaemons := []string{"FROM scratch AS daemons", "COPY --from=daemons-rootfs /rootfs/ /", "COPY --from=build /out/nfsdir /nfsdir", `ENTRYPOINT ["/nfsdir", "daemon"]`}
	if strings.Join(daemons, "\n") != strings.Join(wantDaemons, "\n") {
		t.Errorf("daemons stage:\n%s\nwant:\n%s", strings.Join(daemons, "\n"), strings.Join(wantDaemons, "\n"))
	}
	if !strings.Contains(daemonsRun, "bash tests/k8s/daemons-rootfs.sh /rootfs") {
		t.Errorf("the daemons' root file system is not made by the lab's script: %q", daemonsRun)
	}
	if !strings.Contains(string(mk), "tests/k8s/daemons-rootfs.sh") || !strings.Contains(string(mk), "--target daemons") {
		t.Error("the lab's daemons and make image are not made from tests/k8s/daemons-rootfs.sh and the daemons stage")
	}
	wantFinal := []string{"FROM scratch", "COPY --from=rootfs /rootfs/ /", "COPY --from=build /out/nfsdir /nfsdir", `ENTRYPOINT ["/nfsdir"]`}
	if strings.Join(final, "\n") != strings.Join(wantFinal, "\n") {
		t.Errorf("runtime stage:\n%s\nwant:\n%s", strings.Join(final, "\n"), strings.Join(wantFinal, "\n"))
	}
	if !strings.Contains(rootfsRun, "bash tests/k8s/nfsdir-rootfs.sh /rootfs") {
		t.Errorf("the root file system is not made by the lab's script: %q", rootfsRun)
	}
	if !strings.Contains(string(mk), "tests/k8s/nfsdir-rootfs.sh bin/images/nfsdir-rootfs") {
		t.Error("the lab image is not made by tests/k8s/nfsdir-rootfs.sh")
	}
	xflag := regexp.MustCompile(`-X (\S+)=`)
	var makeX, dockerX []string
	for _, m := range xflag.FindAllStringSubmatch(regexp.MustCompile(`(?m)^LDFLAGS := .*$`).FindString(string(mk)), -1) {
		makeX = append(makeX, m[1])
	}
	for _, m := range xflag.FindAllStringSubmatch(build, -1) {
		dockerX = append(dockerX, m[1])
	}
	if len(makeX) == 0 || strings.Join(makeX, " ") != strings.Join(dockerX, " ") {
		t.Errorf("-X flags differ: Makefile %v, Dockerfile %v", makeX, dockerX)
	}
	if !strings.Contains(build, "CGO_ENABLED=0") || !strings.Contains(build, "./cmd/nfsdir") || !strings.Contains(build, "-o /out/nfsdir") {
		t.Errorf("build step: %s", build)
	}
	if !strings.Contains(copyBin, "/out/nfsdir /nfsdir") || !strings.Contains(entry, `"/nfsdir"`) {
		t.Errorf("copy %q / entrypoint %q do not run the built binary", copyBin, entry)
	}
	script, err := os.ReadFile("../k8s/nfsdir-rootfs.sh")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(script), "sbin/mount.nfs bin/mount bin/umount") {
		t.Error("the root file system script no longer copies mount.nfs, mount and umount")
	}
}

// certificate is the part of a cert-manager Certificate the examples use.
type certificate struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		SecretName string `json:"secretName"`
		IssuerRef  struct {
			Kind, Name string
		} `json:"issuerRef"`
		PrivateKey struct {
			Algorithm      string `json:"algorithm"`
			Size           int    `json:"size"`
			RotationPolicy string `json:"rotationPolicy"`
		} `json:"privateKey"`
		Usages     []string `json:"usages"`
		CommonName string   `json:"commonName"`
		DNSNames   []string `json:"dnsNames"`
		URIs       []string `json:"uris"`
	} `json:"spec"`
}

// checkCertificate checks that an example Certificate is pinned to a role
// as the agent and the controller expect by default: the agents' identity
// with server authentication, or the controller's with client
// authentication.
func checkCertificate(t *testing.T, f string, doc []byte) {
	t.Helper()
	var c certificate
	strictDecode(t, doc, &c)
	want := map[string]string{serveragent.DefaultAgentIdentity: "server auth", serveragent.DefaultControllerIdentity: "client auth"}
	if c.APIVersion != "cert-manager.io/v1" || len(c.Spec.URIs) != 1 || want[c.Spec.URIs[0]] == "" ||
		!slices.Contains(c.Spec.Usages, want[c.Spec.URIs[0]]) || c.Spec.SecretName == "" {
		t.Errorf("%s: Certificate %s: identities %v, usages %v: want one of %v with its usage", f, c.Metadata.Name, c.Spec.URIs, c.Spec.Usages, want)
	}
}
