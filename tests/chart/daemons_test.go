package chart

import (
	"os/exec"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestSecurityDaemons: with securityDaemons, the node plugin's pods and
// the controller's run tlshd and rpc.gssd from the daemons image through
// `nfsdir daemon`, privileged, each with its Secret mounted read-only at
// the directory its --secret-dir names; the controller's pod shares its
// process namespace (nfsdir looks for rpc.gssd among its processes) unless
// it is on the host's network, where it searches the host's. The node's
// tlshd also takes the server's certificates of serverSecretName; the
// controller's pod resolves the servers of controller.hostAliases. Without
// them, no such container or volume is rendered; a daemon enabled without
// its Secret is refused by the schema.
func TestSecurityDaemons(t *testing.T) {
	on := []string{"securityDaemons.tlshd.enabled=true", "securityDaemons.tlshd.secretName=nfs-tls",
		"securityDaemons.gssd.enabled=true", "securityDaemons.gssd.secretName=nfs-krb5", "securityDaemons.gssd.logLevel=2"}
	r := render(t, "nfsdir", on)
	node, ctrl := r.daemonSets[0].Spec.Template.Spec, r.deployments[0].Spec.Template.Spec
	for _, pod := range []struct {
		name string
		spec corev1.PodSpec
	}{{"node", node}, {"controller", ctrl}} {
		for _, d := range []struct{ container, daemon, secret, level string }{
			{"tlshd", "tlshd", "nfs-tls", "0"}, {"rpc-gssd", "rpc.gssd", "nfs-krb5", "2"}} {
			c := container(t, pod.spec, d.container)
			if !strings.HasPrefix(c.Image, "ghcr.io/nfsdir/nfsdir-daemons:") {
				t.Errorf("%s %s: image %s", pod.name, d.container, c.Image)
			}
			dir := "/etc/nfsdir/" + d.container
			want := []string{d.daemon, "--secret-dir=" + dir, "--log-level=" + d.level}
			if strings.Join(c.Args, " ") != strings.Join(want, " ") || len(c.Command) != 0 {
				t.Errorf("%s %s: command %v args %v, want the image's entry point with %v", pod.name, d.container, c.Command, c.Args, want)
			}
			if c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged {
				t.Errorf("%s %s: not privileged", pod.name, d.container)
			}
			var vol string
			for _, m := range c.VolumeMounts {
				if m.MountPath == dir && m.ReadOnly {
					vol = m.Name
				}
			}
			found := false
			for _, v := range pod.spec.Volumes {
				if v.Name == vol && v.Secret != nil && v.Secret.SecretName == d.secret {
					found = true
				}
			}
			if !found {
				t.Errorf("%s %s: Secret %s not mounted read-only at %s", pod.name, d.container, d.secret, dir)
			}
		}
	}
	server := render(t, "nfsdir", append(on, "securityDaemons.tlshd.serverSecretName=nfs-server-tls"))
	for pod, spec := range map[string]corev1.PodSpec{"node": server.daemonSets[0].Spec.Template.Spec, "controller": server.deployments[0].Spec.Template.Spec} {
		c := container(t, spec, "tlshd")
		mounted := false
		for _, m := range c.VolumeMounts {
			for _, v := range spec.Volumes {
				if v.Name == m.Name && m.MountPath == "/etc/nfsdir/tlshd-server" && m.ReadOnly && v.Secret != nil && v.Secret.SecretName == "nfs-server-tls" {
					mounted = true
				}
			}
		}
		if want := pod == "node"; hasArg(c, "--server-secret-dir=/etc/nfsdir/tlshd-server") != want || mounted != want {
			t.Errorf("serverSecretName: the %s's tlshd answers the server's handshakes: %v (args %v), want %v", pod, mounted, c.Args, want)
		}
	}
	if ctrl.ShareProcessNamespace == nil || !*ctrl.ShareProcessNamespace {
		t.Errorf("the controller's pod does not share its process namespace")
	}
	if hasArg(container(t, ctrl, "nfsdir"), "--security-daemons-proc=/host/proc") {
		t.Errorf("the controller searches the host's processes for its own rpc.gssd")
	}
	hostNet := render(t, "nfsdir", append(on, "controller.hostNetwork=true")).deployments[0].Spec.Template.Spec
	if hostNet.ShareProcessNamespace != nil || !hasArg(container(t, hostNet, "nfsdir"), "--security-daemons-proc=/host/proc") {
		t.Errorf("on the host's network the controller searches the host's processes")
	}
	aliased := render(t, "nfsdir", append(on, "controller.hostAliases[0].ip=192.0.2.7", "controller.hostAliases[0].hostnames[0]=nfs.example.com")).deployments[0].Spec.Template.Spec
	if len(aliased.HostAliases) != 1 || aliased.HostAliases[0].IP != "192.0.2.7" || strings.Join(aliased.HostAliases[0].Hostnames, ",") != "nfs.example.com" {
		t.Errorf("controller.hostAliases: the pod has %+v", aliased.HostAliases)
	}
	if len(ctrl.HostAliases) != 0 {
		t.Errorf("by default the controller has host aliases %+v", ctrl.HostAliases)
	}
	nodeOnly := render(t, "nfsdir", append(on, "securityDaemons.controller=false")).deployments[0].Spec.Template.Spec
	for _, c := range containersOf(nodeOnly) {
		if c.Name == "tlshd" || c.Name == "rpc-gssd" {
			t.Errorf("securityDaemons.controller=false: the controller runs %s", c.Name)
		}
	}
	off := render(t, "nfsdir", nil)
	for _, spec := range []corev1.PodSpec{off.daemonSets[0].Spec.Template.Spec, off.deployments[0].Spec.Template.Spec} {
		for _, c := range containersOf(spec) {
			if strings.Contains(c.Image, "nfsdir-daemons") {
				t.Errorf("by default a pod runs %s", c.Name)
			}
		}
		for _, v := range spec.Volumes {
			if v.Secret != nil {
				t.Errorf("by default a pod mounts Secret %s", v.Secret.SecretName)
			}
		}
	}
	out, err := exec.Command(helm(t), "template", "r", chartDir, "--set", "securityDaemons.tlshd.enabled=true").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "schema") {
		t.Errorf("tlshd enabled without its Secret: %v\n%s", err, out)
	}
}
