package chart

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// scc is OpenShift's SecurityContextConstraints, the fields the chart
// sets.
type scc struct {
	APIVersion                                                            string `json:"apiVersion"`
	Kind                                                                  string `json:"kind"`
	Metadata                                                              metav1.ObjectMeta
	AllowPrivilegedContainer, AllowPrivilegeEscalation, AllowHostNetwork  bool
	AllowHostPorts, AllowHostDirVolumePlugin, AllowHostIPC, AllowHostPID  bool
	ReadOnlyRootFilesystem                                                bool
	AllowedCapabilities, RequiredDropCapabilities, DefaultAddCapabilities []string
	RunAsUser, SELinuxContext, FSGroup, SupplementalGroups                struct{ Type string }
	SeccompProfiles, Volumes, Users, Groups                               []string
}

const sccAPI = "--api-versions=security.openshift.io/v1/SecurityContextConstraints"

// TestOpenShiftSCC: on a cluster that serves OpenShift's
// SecurityContextConstraints (or with openshift.scc=true) the chart
// renders one for the release and grants it, by RBAC's use verb, to the
// service accounts of the node plugin and the controller; it admits their
// pods as each set of values renders them (privileged containers, the
// host's network and ports, host paths, every volume type they use). On
// other clusters, or with openshift.scc=false, nothing of it is rendered.
func TestOpenShiftSCC(t *testing.T) {
	daemons := []string{"securityDaemons.tlshd.enabled=true", "securityDaemons.tlshd.secretName=t",
		"securityDaemons.gssd.enabled=true", "securityDaemons.gssd.secretName=k"}
	for name, set := range map[string][]string{
		"defaults":               {sccAPI},
		"asked for":              {"openshift.scc=true"},
		"controller on the host": {sccAPI, "controller.hostNetwork=true"},
		"security daemons":       append([]string{sccAPI, "quota.clientSecret=q"}, daemons...),
	} {
		r := render(t, "nfsdir", set)
		if len(r.sccs) != 1 {
			t.Fatalf("%s: %d SecurityContextConstraints", name, len(r.sccs))
		}
		s := r.sccs[0]
		granted := map[string]bool{}
		for _, b := range r.crBindings {
			if b.RoleRef.Name != s.Metadata.Name+"-scc" {
				continue
			}
			for _, role := range r.clusterRole {
				if role.Name != b.RoleRef.Name {
					continue
				}
				for _, rule := range role.Rules {
					if slices.Equal(rule.APIGroups, []string{"security.openshift.io"}) && slices.Equal(rule.Resources, []string{"securitycontextconstraints"}) &&
						slices.Equal(rule.ResourceNames, []string{s.Metadata.Name}) && slices.Equal(rule.Verbs, []string{"use"}) {
						for _, sub := range b.Subjects {
							granted[sub.Namespace+"/"+sub.Name] = true
						}
					}
				}
			}
		}
		pods := map[string]corev1.PodSpec{"node": r.daemonSets[0].Spec.Template.Spec, "controller": r.deployments[0].Spec.Template.Spec}
		for pod, spec := range pods {
			if !granted["kube-system/"+spec.ServiceAccountName] {
				t.Errorf("%s: the %s's service account %s is not granted the SCC (%v)", name, pod, spec.ServiceAccountName, granted)
			}
			for _, why := range admits(s, spec) {
				t.Errorf("%s: the SCC does not admit the %s's pod: %s", name, pod, why)
			}
		}
	}
	for name, set := range map[string][]string{"not OpenShift": nil, "refused": {sccAPI, "openshift.scc=false"}} {
		if r := render(t, "nfsdir", set); len(r.sccs) != 0 || len(r.clusterRole) != 1 {
			t.Errorf("%s: %d SCCs, %d cluster roles", name, len(r.sccs), len(r.clusterRole))
		}
	}
}

// admits lists why s would not admit a pod of spec.
func admits(s scc, spec corev1.PodSpec) []string {
	var no []string
	if spec.HostNetwork && !s.AllowHostNetwork {
		no = append(no, "host network")
	}
	if spec.HostPID && !s.AllowHostPID {
		no = append(no, "host PID")
	}
	for _, v := range spec.Volumes {
		kind := ""
		switch {
		case v.HostPath != nil:
			kind = "hostPath"
			if !s.AllowHostDirVolumePlugin {
				no = append(no, "host path "+v.HostPath.Path)
			}
		case v.EmptyDir != nil:
			kind = "emptyDir"
		case v.Secret != nil:
			kind = "secret"
		case v.ConfigMap != nil:
			kind = "configMap"
		case v.Projected != nil:
			kind = "projected"
		default:
			kind = "other: " + v.Name
		}
		if !slices.Contains(s.Volumes, kind) {
			no = append(no, "volume type "+kind)
		}
	}
	for _, c := range containersOf(spec) {
		sc := c.SecurityContext
		if sc == nil {
			continue
		}
		if sc.Privileged != nil && *sc.Privileged && !s.AllowPrivilegedContainer {
			no = append(no, "privileged "+c.Name)
		}
		if sc.Capabilities != nil {
			for _, cp := range sc.Capabilities.Add {
				if !slices.Contains(s.AllowedCapabilities, string(cp)) {
					no = append(no, "capability "+string(cp)+" of "+c.Name)
				}
			}
		}
		for _, p := range c.Ports {
			if (spec.HostNetwork || p.HostPort != 0) && !s.AllowHostPorts {
				no = append(no, "host port of "+c.Name)
			}
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			if s.ReadOnlyRootFilesystem {
				no = append(no, "writable root of "+c.Name)
			}
		}
	}
	return no
}
