// Package chart renders the Helm chart with several value sets and checks
// every object: helm lint --strict, strict decoding into the real k8s.io/api
// types (an unknown field fails), and the invariants an operator relies on.
// It needs helm built from source (make helm; make test does it).
package chart

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	"sigs.k8s.io/yaml"

	"github.com/nfsdir/nfsdir/pkg/export"
)

const chartDir = "../../charts/nfsdir"

func helm(t *testing.T) string {
	t.Helper()
	if h := os.Getenv("NFSDIR_HELM"); h != "" {
		return h
	}
	h, _ := filepath.Abs("../../bin/helm")
	if _, err := os.Stat(h); err != nil {
		t.Skip("helm is not built: run `make helm` (make test builds it and sets NFSDIR_HELM)")
	}
	return h
}

// valueSets are the configurations every check runs on.
var valueSets = map[string][]string{
	"default":    nil,
	"snapshots":  {"feature.enableSnapshotter=true", "feature.enableResizer=false", "volumeSnapshotClasses[0].name=nfsdir", "volumeSnapshotClasses[0].default=true", "volumeSnapshotClasses[1].name=nfsdir-retain", "volumeSnapshotClasses[1].deletionPolicy=Retain"},
	"inline":     {"feature.enableInlineVolume=true", "feature.enableCapacityTracking=true"},
	"kubeletdir": {"kubeletDir=/var/lib/k0s/kubelet/", "node.stage=true"},
	// Drop-in for csi-driver-nfs: nfsdir under its driver name.
	"dropin":       {"driver.name=nfs.csi.k8s.io"},
	"storageclass": {"storageClasses[0].name=nfsdir", "storageClasses[0].server=nfs.example.com", "storageClasses[0].share=/srv/k8s", "storageClasses[0].default=true", "storageClasses[0].mountOptions[0]=nfsvers=4.1", "storageClasses[0].subDir=${pvc.metadata.namespace}/${pvc.metadata.name}", "quota.clientSecret=nfsdir-quota-client"},
	"replicas":     {"controller.replicas=3", "imagePullSecrets[0].name=regcred", "controller.podLabels.team=storage", "logFormat=json", "controller.claimMetadata.enabled=true", "driver.clusterID=prod-eu-1", "exports.main.server=nfs1.example.com", "exports.main.share=/srv/k8s", "exports.v6.server=fd00::1", "exports.v6.share=/k8s"},
}

// rendered holds the decoded objects of one helm template run.
type rendered struct {
	csiDrivers  []storagev1.CSIDriver
	classes     []storagev1.StorageClass
	deployments []appsv1.Deployment
	daemonSets  []appsv1.DaemonSet
	accounts    []corev1.ServiceAccount
	clusterRole []rbacv1.ClusterRole
	crBindings  []rbacv1.ClusterRoleBinding
	roles       []rbacv1.Role
	roleBinds   []rbacv1.RoleBinding
	snapClasses []volumeSnapshotClass
	sccs        []scc
	configMaps  []corev1.ConfigMap
	names       map[string]int // "Kind/namespace/name" -> count
}

func strictDecode(t *testing.T, doc []byte, into any) {
	t.Helper()
	js, err := yaml.YAMLToJSON(doc)
	if err != nil {
		t.Fatalf("YAML: %v\n%s", err, doc)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		t.Fatalf("strict decode into %T: %v\n%s", into, err, doc)
	}
}

// decodeAppend strictly decodes doc into a new T appended to list.
func decodeAppend[T any](t *testing.T, doc []byte, list *[]T) {
	t.Helper()
	var v T
	strictDecode(t, doc, &v)
	*list = append(*list, v)
}

func render(t *testing.T, release string, set []string) *rendered {
	t.Helper()
	args := []string{"template", release, chartDir, "--namespace", "kube-system"}
	for _, s := range set {
		if v, ok := strings.CutPrefix(s, "--api-versions="); ok {
			args = append(args, "--api-versions", v)
			continue
		}
		if v, ok := strings.CutPrefix(s, "--kube-version="); ok {
			args = append(args, "--kube-version", v)
			continue
		}
		args = append(args, "--set", s)
	}
	out, err := exec.Command(helm(t), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("helm %v: %v\n%s", args, err, out)
	}
	r := &rendered{names: map[string]int{}}
	for _, doc := range strings.Split(string(out), "\n---") {
		var meta struct {
			Kind     string `json:"kind"`
			Metadata struct{ Name, Namespace string }
		}
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("YAML: %v\n%s", err, doc)
		}
		if meta.Kind == "" {
			continue // comments only
		}
		r.names[meta.Kind+"/"+meta.Metadata.Namespace+"/"+meta.Metadata.Name]++
		d := []byte(doc)
		switch meta.Kind {
		case "CSIDriver":
			decodeAppend(t, d, &r.csiDrivers)
		case "StorageClass":
			decodeAppend(t, d, &r.classes)
		case "Deployment":
			decodeAppend(t, d, &r.deployments)
		case "DaemonSet":
			decodeAppend(t, d, &r.daemonSets)
		case "ServiceAccount":
			decodeAppend(t, d, &r.accounts)
		case "ClusterRole":
			decodeAppend(t, d, &r.clusterRole)
		case "ClusterRoleBinding":
			decodeAppend(t, d, &r.crBindings)
		case "Role":
			decodeAppend(t, d, &r.roles)
		case "RoleBinding":
			decodeAppend(t, d, &r.roleBinds)
		case "VolumeSnapshotClass":
			decodeAppend(t, d, &r.snapClasses)
		case "SecurityContextConstraints":
			decodeAppend(t, d, &r.sccs)
		case "ConfigMap":
			decodeAppend(t, d, &r.configMaps)
		default:
			t.Errorf("unexpected kind %s", meta.Kind)
		}
	}
	for n, c := range r.names {
		if c > 1 {
			t.Errorf("%s rendered %d times", n, c)
		}
	}
	return r
}

func TestLintStrict(t *testing.T) {
	for name, set := range valueSets {
		args := []string{"lint", "--strict", chartDir}
		for _, s := range set {
			args = append(args, "--set", s)
		}
		if out, err := exec.Command(helm(t), args...).CombinedOutput(); err != nil {
			t.Errorf("%s: helm lint --strict: %v\n%s", name, err, out)
		}
	}
}

func TestSchemaRejectsTyposAndWrongTypes(t *testing.T) {
	for _, set := range []string{"driver.nmae=x", "controller.replicas=many", "logLevel=loud", "kubeletDir=relative",
		"driver.defaultOnDelete=shred", "feature.enableSnapshots=true", "storageClasses[0].name=x",
		"quota.clientSecret=Not_A_Name", "quota.secret=x"} {
		out, err := exec.Command(helm(t), "template", "r", chartDir, "--set", set).CombinedOutput()
		if err == nil {
			t.Errorf("--set %s was accepted", set)
		} else if !strings.Contains(string(out), "schema") {
			t.Errorf("--set %s failed without naming the schema: %s", set, out)
		}
	}
}

// checkStartupProbes: every container kubelet checks for liveness first has
// a startup probe of the same check, and the liveness probe no initial
// delay, so a container that is slow to start on a loaded node is neither
// restarted nor reported unhealthy for it, and one that hangs later is.
func checkStartupProbes(t *testing.T, spec corev1.PodSpec) {
	t.Helper()
	for _, c := range containersOf(spec) {
		l, s := c.LivenessProbe, c.StartupProbe
		if l == nil {
			continue
		}
		if s == nil || !reflect.DeepEqual(s.ProbeHandler, l.ProbeHandler) || l.InitialDelaySeconds != 0 {
			t.Errorf("%s: liveness probe %+v with startup probe %+v", c.Name, l, s)
			continue
		}
		if budget := s.PeriodSeconds * s.FailureThreshold; budget < 120 {
			t.Errorf("%s: the startup probe gives a container %d s to start", c.Name, budget)
		}
	}
}

func container(t *testing.T, spec corev1.PodSpec, name string) *corev1.Container {
	t.Helper()
	for _, c := range containersOf(spec) {
		if c.Name == name {
			return &c
		}
	}
	return nil
}

// containersOf returns every container of a pod that runs beside the
// others: its native sidecars (init containers with restartPolicy Always)
// and its regular containers.
func containersOf(spec corev1.PodSpec) []corev1.Container {
	var out []corev1.Container
	for _, c := range spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			out = append(out, c)
		}
	}
	return append(out, spec.Containers...)
}

func hasArg(c *corev1.Container, arg string) bool {
	for _, a := range c.Args {
		if a == arg || strings.HasPrefix(a, arg+"=") {
			return true
		}
	}
	return false
}

// checkDriverArgs runs the nfsdir binary's own flag parser over the args the
// chart gives it.
func checkDriverArgs(t *testing.T, bin string, c *corev1.Container) {
	t.Helper()
	var args []string
	for _, a := range c.Args {
		args = append(args, strings.ReplaceAll(a, "$(NODE_ID)", "node-1"))
	}
	out, err := exec.Command(bin, append(args, "--check-config")...).CombinedOutput()
	if err != nil {
		t.Errorf("nfsdir rejects the chart's args %v: %v\n%s", args, err, out)
	}
}

func buildDriver(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "nfsdir")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/nfsdir/nfsdir/cmd/nfsdir").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func TestInvariants(t *testing.T) {
	bin := buildDriver(t)
	for name, set := range valueSets {
		t.Run(name, func(t *testing.T) {
			r := render(t, "rel", set)
			values := strings.Join(set, ",")
			kubelet := "/var/lib/kubelet"
			if strings.Contains(values, "kubeletDir=/var/lib/k0s/kubelet") {
				kubelet = "/var/lib/k0s/kubelet"
			}
			if len(r.csiDrivers) != 1 || len(r.deployments) != 1 || len(r.daemonSets) != 1 {
				t.Fatalf("objects: %d CSIDriver, %d Deployment, %d DaemonSet", len(r.csiDrivers), len(r.deployments), len(r.daemonSets))
			}
			drv := r.csiDrivers[0]
			driver := "nfsdir.csi.io"
			if strings.Contains(values, "driver.name=nfs.csi.k8s.io") {
				driver = "nfs.csi.k8s.io"
			}
			if drv.Name != driver || drv.Spec.AttachRequired == nil || *drv.Spec.AttachRequired ||
				drv.Spec.FSGroupPolicy == nil || *drv.Spec.FSGroupPolicy != storagev1.FileFSGroupPolicy ||
				drv.Spec.RequiresRepublish == nil || *drv.Spec.RequiresRepublish {
				t.Errorf("CSIDriver spec %+v", drv.Spec)
			}
			inline := strings.Contains(values, "enableInlineVolume=true")
			if got := len(drv.Spec.VolumeLifecycleModes); (inline && got != 2) || (!inline && got != 1) {
				t.Errorf("volumeLifecycleModes %v with inline=%v", drv.Spec.VolumeLifecycleModes, inline)
			}
			capacity := strings.Contains(values, "enableCapacityTracking=true")
			if drv.Spec.StorageCapacity == nil || *drv.Spec.StorageCapacity != capacity {
				t.Errorf("storageCapacity %v, capacity tracking %v", drv.Spec.StorageCapacity, capacity)
			}

			// Controller.
			dep := r.deployments[0].Spec.Template.Spec
			if dep.HostNetwork {
				t.Error("controller uses the host network: two replicas on one node would collide")
			}
			for _, c := range containersOf(dep) {
				for _, p := range c.Ports {
					if p.HostPort != 0 {
						t.Errorf("controller container %s has host port %d", c.Name, p.HostPort)
					}
				}
			}
			nfsdir := container(t, dep, "nfsdir")
			prov := container(t, dep, "csi-provisioner")
			if nfsdir == nil || prov == nil || container(t, dep, "liveness-probe") == nil {
				t.Fatalf("controller containers: %+v", dep.Containers)
			}
			if !hasArg(nfsdir, "--mode") || nfsdir.Args[0] != "--mode=controller" || nfsdir.SecurityContext == nil || !*nfsdir.SecurityContext.Privileged {
				t.Errorf("controller nfsdir container: %v", nfsdir.Args)
			}
			checkDriverArgs(t, bin, nfsdir)
			quota := strings.Contains(values, "quota.clientSecret=nfsdir-quota-client")
			mounted := slices.ContainsFunc(nfsdir.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "quota-client" && m.ReadOnly && m.SubPath == "" })
			secret := slices.ContainsFunc(dep.Volumes, func(v corev1.Volume) bool { return v.Secret != nil && v.Secret.SecretName == "nfsdir-quota-client" })
			if hasArg(nfsdir, "--quota-tls-cert") != quota || hasArg(nfsdir, "--quota-ca") != quota || hasArg(nfsdir, "--quota-agent-identity") != quota || mounted != quota || secret != quota {
				t.Errorf("quota client secret %v: args %v, mounted %v, volume %v", quota, nfsdir.Args, mounted, secret)
			}
			claimMeta := strings.Contains(values, "claimMetadata.enabled=true")
			if hasArg(nfsdir, "--read-claim-metadata") != claimMeta || (claimMeta && !grants(r, "", "persistentvolumeclaims", "get")) {
				t.Errorf("claim metadata %v: controller args %v", claimMeta, nfsdir.Args)
			}
			checkExports(t, r, strings.Contains(values, "exports.main"), dep, r.daemonSets[0].Spec.Template.Spec)
			clusterID := strings.Contains(values, "driver.clusterID=prod-eu-1")
			if hasArg(nfsdir, "--cluster-id=prod-eu-1") != clusterID || hasArg(nfsdir, "--cluster-id") != clusterID {
				t.Errorf("driver.clusterID %v: controller args %v", clusterID, nfsdir.Args)
			}
			for _, a := range []string{"--leader-election", "--extra-create-metadata", "--timeout", "--csi-address"} {
				if !hasArg(prov, a) {
					t.Errorf("csi-provisioner lacks %s: %v", a, prov.Args)
				}
			}
			if hasArg(prov, "--enable-capacity") != capacity {
				t.Errorf("csi-provisioner capacity args %v with capacity tracking %v", prov.Args, capacity)
			}
			// Every leader-electing sidecar gets the chart's lease timing.
			for _, c := range containersOf(dep) {
				if hasArg(&c, "--leader-election") && (!contains(c.Args, "--leader-election-lease-duration=137s") ||
					!contains(c.Args, "--leader-election-renew-deadline=107s") || !contains(c.Args, "--leader-election-retry-period=26s")) {
					t.Errorf("%s: leader election without the chart's lease timing: %v", c.Name, c.Args)
				}
			}
			snap := strings.Contains(values, "enableSnapshotter=true")
			if (container(t, dep, "csi-snapshotter") != nil) != snap || (container(t, dep, "csi-resizer") != nil) == strings.Contains(values, "enableResizer=false") {
				t.Error("snapshotter/resizer sidecars do not follow their switches")
			}
			checkSnapshotClasses(t, r, snap)

			// Node.
			ds := r.daemonSets[0].Spec.Template.Spec
			checkStartupProbes(t, dep)
			checkStartupProbes(t, ds)
			node := container(t, ds, "nfsdir")
			reg := container(t, ds, "node-driver-registrar")
			if node == nil || reg == nil || container(t, ds, "liveness-probe") == nil {
				t.Fatalf("node containers: %+v", ds.Containers)
			}
			checkDriverArgs(t, bin, node)
			checkNodeStage(t, ds, kubelet, strings.Contains(values, "node.stage=true"))
			if !ds.HostNetwork || len(ds.Tolerations) == 0 || ds.Tolerations[0].Operator != corev1.TolerationOpExists {
				t.Errorf("node pod: hostNetwork %v, tolerations %+v", ds.HostNetwork, ds.Tolerations)
			}
			vols := map[string]*corev1.Volume{}
			for i := range ds.Volumes {
				vols[ds.Volumes[i].Name] = &ds.Volumes[i]
			}
			plugin := kubelet + "/plugins/" + driver
			if !contains(node.Args, "--driver-name="+driver) || !contains(nfsdir.Args, "--driver-name="+driver) {
				t.Errorf("driver name %s not passed: node %v, controller %v", driver, node.Args, nfsdir.Args)
			}
			if v := vols["socket-dir"]; v == nil || v.HostPath == nil || v.HostPath.Path != plugin {
				t.Errorf("socket-dir %+v, want hostPath %s", v, plugin)
			}
			if !hasArg(reg, "--kubelet-registration-path") || !contains(reg.Args, "--kubelet-registration-path="+plugin+"/csi.sock") {
				t.Errorf("registration path %v does not match the socket %s/csi.sock", reg.Args, plugin)
			}
			if v := vols["pods-mount-dir"]; v == nil || v.HostPath == nil || v.HostPath.Path != kubelet+"/pods" {
				t.Errorf("pods-mount-dir %+v", v)
			}
			var bidir bool
			for _, m := range node.VolumeMounts {
				if m.Name == "pods-mount-dir" {
					bidir = m.MountPath == kubelet+"/pods" && m.MountPropagation != nil && *m.MountPropagation == corev1.MountPropagationBidirectional
				}
			}
			if !bidir {
				t.Errorf("kubelet pods dir not mounted Bidirectional at %s/pods: %+v", kubelet, node.VolumeMounts)
			}
			if v := vols["registration-dir"]; v == nil || v.HostPath.Path != kubelet+"/plugins_registry" {
				t.Errorf("registration-dir %+v", v)
			}

			// Every container: resources; the driver and registrar: probes.
			for _, spec := range []corev1.PodSpec{dep, ds} {
				for _, c := range spec.Containers {
					if len(c.Resources.Requests) == 0 || len(c.Resources.Limits) == 0 {
						t.Errorf("container %s has no resources", c.Name)
					}
					// The livenessprobe sidecar is the probe of the others.
					if c.Name != "liveness-probe" && c.LivenessProbe == nil {
						t.Errorf("container %s has no liveness probe", c.Name)
					}
				}
			}
			// RBAC: the provisioner's verbs, and least privilege.
			if len(r.clusterRole) != 1 || len(r.crBindings) != 1 || len(r.roles) != 1 || len(r.roleBinds) != 1 {
				t.Fatalf("RBAC objects: %d %d %d %d", len(r.clusterRole), len(r.crBindings), len(r.roles), len(r.roleBinds))
			}
			want := map[string]string{"persistentvolumes": "get,list,watch,create,delete,patch", "persistentvolumeclaims": "get,list,watch,update"}
			for _, rule := range r.clusterRole[0].Rules {
				for _, res := range rule.Resources {
					if w, ok := want[res]; ok && strings.Join(rule.Verbs, ",") != w {
						t.Errorf("%s verbs %v, want %s", res, rule.Verbs, w)
					}
					if res == "namespaces" && (strings.Join(rule.ResourceNames, ",") != "kube-system" || strings.Join(rule.Verbs, ",") != "get") {
						t.Errorf("namespaces: %+v, want get on kube-system only (the cluster's identity)", rule)
					}
					if res == "secrets" || contains(rule.Verbs, "*") || contains(rule.Resources, "*") {
						t.Errorf("over-broad rule %+v", rule)
					}
				}
			}
			if r.crBindings[0].Subjects[0].Name != r.deployments[0].Spec.Template.Spec.ServiceAccountName {
				t.Error("ClusterRoleBinding does not bind the controller's service account")
			}
			if strings.Contains(values, "storageClasses") {
				sc := r.classes[0]
				if sc.Provisioner != drv.Name || sc.Parameters["server"] != "nfs.example.com" || sc.Annotations["storageclass.kubernetes.io/is-default-class"] != "true" {
					t.Errorf("StorageClass %+v", sc)
				}
			}
		})
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestTwoReleasesSideBySide: two releases with different driver names and
// node health ports share no cluster-scoped or namespaced name, socket path
// or host port.
func TestTwoReleasesSideBySide(t *testing.T) {
	a := render(t, "alpha", []string{"driver.name=alpha.nfsdir.csi.io"})
	b := render(t, "beta", []string{"driver.name=beta.nfsdir.csi.io", "node.healthPort=29663", "node.metricsPort=29665"})
	for n := range a.names {
		if b.names[n] > 0 {
			t.Errorf("both releases render %s", n)
		}
	}
	pa := a.daemonSets[0].Spec.Template.Spec.Volumes
	pb := b.daemonSets[0].Spec.Template.Spec.Volumes
	if fmt.Sprint(pa[0].HostPath.Path) == fmt.Sprint(pb[0].HostPath.Path) {
		t.Errorf("both releases use socket directory %s", pa[0].HostPath.Path)
	}
	ports := map[int32]string{}
	for rel, r := range map[string]*rendered{"alpha": a, "beta": b} {
		for _, c := range r.daemonSets[0].Spec.Template.Spec.Containers {
			for _, p := range c.Ports {
				if other, taken := ports[p.ContainerPort]; taken {
					t.Errorf("host port %d used by %s and %s/%s", p.ContainerPort, other, rel, c.Name)
				}
				ports[p.ContainerPort] = rel + "/" + c.Name
			}
		}
	}
	for _, r := range []*rendered{a, b} {
		node := container(t, r.daemonSets[0].Spec.Template.Spec, "nfsdir")
		probe := container(t, r.daemonSets[0].Spec.Template.Spec, "liveness-probe")
		var health, metricsArg bool
		for _, p := range node.Ports {
			health = health || (p.Name == "healthz" && contains(probe.Args, fmt.Sprintf("--http-endpoint=[$(POD_IP)]:%d", p.ContainerPort)))
			metricsArg = metricsArg || (p.Name == "metrics" && contains(node.Args, fmt.Sprintf("--metrics-address=[$(POD_IP)]:%d", p.ContainerPort)))
		}
		if !health || !metricsArg {
			t.Errorf("node ports do not match the args: %+v %v %v", node.Ports, node.Args, probe.Args)
		}
	}
}

// TestObjectNames: objects are named after the release, without saying
// nfsdir twice when the release name already does.
func TestObjectNames(t *testing.T) {
	for release, want := range map[string]string{"nfsdir": "nfsdir", "my-nfsdir": "my-nfsdir", "storage": "storage-nfsdir"} {
		r := render(t, release, nil)
		for _, n := range []string{"Deployment/kube-system/" + want + "-controller", "DaemonSet/kube-system/" + want + "-node"} {
			if r.names[n] != 1 {
				t.Errorf("release %s: no %s among %v", release, n, r.names)
			}
		}
	}
}

// TestNodeHTTPBindsToThePodIP: by default the node pods (host network)
// serve /metrics and /healthz on the pod's IP only, with POD_IP from the
// downward API in each container that uses it; httpBind=all
// binds every address and needs no POD_IP.
func TestNodeHTTPBindsToThePodIP(t *testing.T) {
	for _, c := range []struct {
		set  []string
		host string
	}{{nil, "[$(POD_IP)]"}, {[]string{"node.httpBind=all"}, ""}} {
		spec := render(t, "nfsdir", c.set).daemonSets[0].Spec.Template.Spec
		for name, arg := range map[string]string{"nfsdir": "--metrics-address=", "liveness-probe": "--http-endpoint="} {
			ct := container(t, spec, name)
			var addr string
			for _, a := range ct.Args {
				if v, ok := strings.CutPrefix(a, arg); ok {
					addr = v
				}
			}
			if !strings.HasPrefix(addr, c.host+":") {
				t.Errorf("%v: %s listens on %q, want host %q", c.set, name, addr, c.host)
			}
			podIP := false
			for _, e := range ct.Env {
				podIP = podIP || (e.Name == "POD_IP" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.podIP")
			}
			if podIP != (c.host != "") {
				t.Errorf("%v: %s has POD_IP from status.podIP: %v", c.set, name, podIP)
			}
		}
	}
	if out, err := exec.Command(helm(t), "template", "x", chartDir, "--set", "node.httpBind=localhost").CombinedOutput(); err == nil {
		t.Errorf("httpBind=localhost accepted (kubelet's probe could not reach it):\n%s", out)
	}
}

// TestVolumeAttributesClassFollowsTheCluster: with
// feature.enableVolumeAttributesClass unset, the provisioner and the
// resizer get the VolumeAttributesClass feature gate (and the provisioner
// may read the classes) exactly when the cluster serves
// VolumeAttributesClass in storage.k8s.io/v1beta1, the version the pinned
// sidecars read (v1 alone does not do); true and false force it.
func TestVolumeAttributesClassFollowsTheCluster(t *testing.T) {
	const gate = "--feature-gates=VolumeAttributesClass=true"
	for _, c := range []struct {
		set  []string
		want bool
	}{
		{nil, false},
		{[]string{"--api-versions=storage.k8s.io/v1/VolumeAttributesClass"}, false},
		{[]string{"--api-versions=storage.k8s.io/v1beta1/VolumeAttributesClass"}, true},
		{[]string{"feature.enableVolumeAttributesClass=true"}, true},
		{[]string{"--api-versions=storage.k8s.io/v1beta1/VolumeAttributesClass", "feature.enableVolumeAttributesClass=false"}, false},
	} {
		r := render(t, "rel", c.set)
		spec := r.deployments[0].Spec.Template.Spec
		for _, name := range []string{"csi-provisioner", "csi-resizer"} {
			if got := contains(container(t, spec, name).Args, gate); got != c.want {
				t.Errorf("%v: %s has the VolumeAttributesClass gate: %v, want %v", c.set, name, got, c.want)
			}
		}
		readers := 0
		for _, rule := range r.clusterRole[0].Rules {
			if slices.Contains(rule.Resources, "volumeattributesclasses") {
				readers++
			}
		}
		if want := map[bool]int{false: 1, true: 2}[c.want]; readers != want {
			t.Errorf("%v: %d rules read volumeattributesclasses, want %d", c.set, readers, want)
		}
	}
}

// volumeSnapshotClass is the part of snapshot.storage.k8s.io/v1
// VolumeSnapshotClass the chart sets (the type lives in the
// external-snapshotter client module, which the chart test does not need).
type volumeSnapshotClass struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name        string            `json:"name"`
		Labels      map[string]string `json:"labels"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Driver         string `json:"driver"`
	DeletionPolicy string `json:"deletionPolicy"`
}

// checkSnapshotClasses: VolumeSnapshotClasses only with the snapshotter,
// for this driver, with a valid deletion policy (Delete by default), the
// default one annotated.
func checkSnapshotClasses(t *testing.T, r *rendered, snap bool) {
	t.Helper()
	if !snap {
		if len(r.snapClasses) != 0 {
			t.Errorf("VolumeSnapshotClasses without the snapshotter: %+v", r.snapClasses)
		}
		return
	}
	if len(r.snapClasses) != 2 {
		t.Fatalf("VolumeSnapshotClasses: %+v, want the two asked for", r.snapClasses)
	}
	for _, c := range r.snapClasses {
		want := map[string]string{"nfsdir": "Delete", "nfsdir-retain": "Retain"}[c.Metadata.Name]
		if c.APIVersion != "snapshot.storage.k8s.io/v1" || c.Driver != "nfsdir.csi.io" || c.DeletionPolicy != want {
			t.Errorf("VolumeSnapshotClass %+v; want driver nfsdir.csi.io, deletionPolicy %s", c, want)
		}
		def := c.Metadata.Annotations["snapshot.storage.kubernetes.io/is-default-class"] == "true"
		if def != (c.Metadata.Name == "nfsdir") {
			t.Errorf("VolumeSnapshotClass %s default=%v", c.Metadata.Name, def)
		}
	}
}

// grants reports whether a ClusterRole of r allows verb on resource of
// API group group.
func grants(r *rendered, group, resource, verb string) bool {
	for _, cr := range r.clusterRole {
		for _, rule := range cr.Rules {
			if contains(rule.APIGroups, group) && contains(rule.Resources, resource) && contains(rule.Verbs, verb) {
				return true
			}
		}
	}
	return false
}

// TestControllerStartsInOrder: where kubelet runs native sidecars
// (Kubernetes 1.29 and later, or when asked), the controller's sidecars are
// init containers with restartPolicy Always: the liveness probe first (it
// dials the driver anew at each probe), then nfsdir, each after it with a
// startup probe (kubelet starts the next one only once it passed), and the
// provisioner is the pod's one regular container; elsewhere, or when
// turned off, every container is a regular one.
func TestControllerStartsInOrder(t *testing.T) {
	for _, c := range []struct {
		set    []string
		native bool
	}{
		{nil, true},
		{[]string{"--kube-version=1.29.0", "feature.enableSnapshotter=true"}, true},
		{[]string{"--kube-version=1.28.9"}, false},
		{[]string{"controller.nativeSidecars=false"}, false},
		{[]string{"--kube-version=1.28.9", "controller.nativeSidecars=true"}, true},
	} {
		spec := render(t, "rel", c.set).deployments[0].Spec.Template.Spec
		var order []string
		for _, ctr := range containersOf(spec) {
			order = append(order, ctr.Name)
			if ctr.Name != "liveness-probe" && (ctr.StartupProbe == nil || ctr.StartupProbe.PeriodSeconds > 2) {
				t.Errorf("%v: %s starts with probe %+v", c.set, ctr.Name, ctr.StartupProbe)
			}
		}
		if len(containersOf(spec)) != len(spec.InitContainers)+len(spec.Containers) {
			t.Errorf("%v: an init container that does not keep running: %+v", c.set, spec.InitContainers)
		}
		if c.native {
			if len(spec.Containers) != 1 || spec.Containers[0].Name != "csi-provisioner" || len(spec.InitContainers) < 3 ||
				spec.InitContainers[0].Name != "liveness-probe" || spec.InitContainers[1].Name != "nfsdir" {
				t.Errorf("%v: init containers then containers: %v", c.set, order)
			}
		} else if len(spec.InitContainers) != 0 {
			t.Errorf("%v: containers %v, init containers %d", c.set, order, len(spec.InitContainers))
		}
	}
}

// TestControllerOnTheHostNetwork: controller.hostNetwork puts the
// controller's pod in the host's network namespace (where the host's tlshd
// and rpc.gssd serve its share mounts) with the host's /proc, read-only,
// where nfsdir looks for rpc.gssd; by default the pod has its own network
// and no host path.
func TestControllerOnTheHostNetwork(t *testing.T) {
	for _, on := range []bool{false, true} {
		spec := render(t, "nfsdir", []string{fmt.Sprintf("controller.hostNetwork=%v", on)}).deployments[0].Spec.Template.Spec
		if spec.HostNetwork != on || (spec.DNSPolicy == corev1.DNSClusterFirstWithHostNet) != on {
			t.Errorf("hostNetwork=%v: pod hostNetwork %v, dnsPolicy %q", on, spec.HostNetwork, spec.DNSPolicy)
		}
		c := container(t, spec, "nfsdir")
		if hasArg(c, "--security-daemons-proc=/host/proc") != on {
			t.Errorf("hostNetwork=%v: args %v", on, c.Args)
		}
		mounted := false
		for _, m := range c.VolumeMounts {
			if m.MountPath == "/host/proc" {
				mounted = m.ReadOnly
				if !m.ReadOnly {
					t.Errorf("/host/proc is writable")
				}
			}
		}
		hostPaths := 0
		for _, v := range spec.Volumes {
			if v.HostPath != nil {
				hostPaths++
				if v.HostPath.Path != "/proc" {
					t.Errorf("host path %s", v.HostPath.Path)
				}
			}
		}
		if mounted != on || (hostPaths == 1) != on {
			t.Errorf("hostNetwork=%v: /host/proc mounted %v, %d host paths", on, mounted, hostPaths)
		}
	}
}

// checkExports: the value exports is a ConfigMap of one
// name=server:/share per line, which the controller and the node plugin
// mount (read-only, without subPath, so that updates reach them) and
// follow with --exports-file; no export is an argument, so changing
// exports changes no pod template.
func checkExports(t *testing.T, r *rendered, named bool, pods ...corev1.PodSpec) {
	t.Helper()
	var data string
	for _, cm := range r.configMaps {
		if strings.HasSuffix(cm.Name, "-exports") {
			data = cm.Data["exports"]
		}
	}
	has := strings.Contains(data, "\nmain=nfs1.example.com:/srv/k8s\n") && strings.Contains(data, "\nv6=[fd00::1]:/k8s")
	if has != named {
		t.Errorf("exports %v: the ConfigMap holds %q", named, data)
	}
	if _, err := export.ParseFile(data); err != nil {
		t.Errorf("the exports ConfigMap does not parse: %v", err)
	}
	for _, pod := range pods {
		c := container(t, pod, "nfsdir")
		mounted := slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
			return m.Name == "exports" && m.ReadOnly && m.SubPath == "" && m.MountPath == "/etc/nfsdir/exports"
		})
		volume := slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool {
			return v.Name == "exports" && v.ConfigMap != nil && strings.HasSuffix(v.ConfigMap.Name, "-exports")
		})
		if !hasArg(c, "--exports-file=/etc/nfsdir/exports/exports") || hasArg(c, "--export") || !mounted || !volume {
			t.Errorf("%s: args %v, exports mounted %v, volume %v", c.Name, c.Args, mounted, volume)
		}
	}
}
