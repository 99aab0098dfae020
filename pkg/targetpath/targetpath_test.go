package targetpath

import (
	"path"
	"strings"
	"testing"
)

func TestCheckKubelet(t *testing.T) {
	r := Rule{KubeletDir: "/var/lib/kubelet"}
	good := "/var/lib/kubelet/pods/0b6c-11/volumes/kubernetes.io~csi/pvc-1/mount"
	tg, err := r.Check(good)
	if err != nil || tg.Base != "/var/lib/kubelet" || tg.Parent != "pods/0b6c-11/volumes/kubernetes.io~csi/pvc-1" || tg.Leaf != "mount" || tg.Path() != good {
		t.Fatalf("Check(%q) = %+v, %v", good, tg, err)
	}
	if _, err := r.Check("/var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/team a/mount"); err != nil {
		t.Errorf("a volume name with a space: %v", err)
	}
	bad := map[string]string{
		"":                                       "required",
		"relative/pods":                          "absolute",
		"/var/lib/kubelet/pods/../../../../sbin": "clean",
		"/var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/../mount":   "clean",
		"/var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/v/../mount": "clean",
		"/var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/v/mount/":   "clean",
		"/var/lib/kubelet/pods/u/volumes/kubernetes.io~csi//mount":     "clean",
		"/var/lib/kubelet/pods/u/volumes/kubernetes.io~nfs/v/mount":    "kubelet CSI volume path",
		"/var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/v/mount/x":  "kubelet CSI volume path",
		"/var/lib/kubeletX/pods/u/volumes/kubernetes.io~csi/v/mount":   "not below",
		"/usr/sbin":        "not below",
		"/var/lib/kubelet": "not below",
		"/var/lib/kubelet/plugins/nfsdir.csi.io/csi.sock":          "kubelet CSI volume path",
		"/var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/v/\x00": "NUL",
		"/" + strings.Repeat("a", 5000):                            "bytes long",
	}
	for p, want := range bad {
		if _, err := r.Check(p); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Check(%q) = %v, want an error with %q", p, err, want)
		}
	}
}

func TestCheckStaging(t *testing.T) {
	r := Rule{KubeletDir: "/var/lib/kubelet"}
	for _, good := range []string{
		"/var/lib/kubelet/plugins/kubernetes.io/csi/nfsdir.csi.io/0c9a4f/globalmount",
		"/var/lib/kubelet/plugins/kubernetes.io/csi/pv/pvc-1/globalmount",
	} {
		tg, err := r.CheckStaging(good)
		if err != nil || tg.Leaf != "globalmount" || tg.Path() != good {
			t.Errorf("CheckStaging(%q) = %+v, %v", good, tg, err)
		}
		if _, err := r.Check(good); err == nil {
			t.Errorf("Check(%q) took a staging path as a publish target", good)
		}
	}
	for _, bad := range []string{
		"/var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/v/mount",
		"/var/lib/kubelet/plugins/kubernetes.io/csi/d/h/globalmount/x",
		"/var/lib/kubelet/plugins/kubernetes.io/csi/d/../globalmount",
		"/var/lib/kubelet/plugins/nfsdir.csi.io/stage/h/globalmount",
		"/var/lib/kubelet/plugins/kubernetes.io/csi/d/h/mount",
	} {
		if _, err := r.CheckStaging(bad); err == nil {
			t.Errorf("CheckStaging(%q) accepted", bad)
		}
	}
	root := Rule{Root: "/tmp/csi"}
	if _, err := root.CheckStaging("/tmp/csi/staging/v1"); err != nil {
		t.Errorf("a staging path below the root: %v", err)
	}
}

func TestCheckRoot(t *testing.T) {
	r := Rule{Root: "/tmp/csi/"}
	tg, err := r.Check("/tmp/csi/a/target")
	if err != nil || tg.Base != "/tmp/csi" || tg.Parent != "a" || tg.Leaf != "target" {
		t.Fatalf("Check = %+v, %v", tg, err)
	}
	if tg, err := r.Check("/tmp/csi/t"); err != nil || tg.Parent != "" || tg.Path() != "/tmp/csi/t" {
		t.Fatalf("Check directly below the root = %+v, %v", tg, err)
	}
	for _, p := range []string{"/tmp/csi", "/tmp/csi/", "/tmp/csi/../etc", "/tmp/csix/a", "/etc/passwd"} {
		if _, err := r.Check(p); err == nil {
			t.Errorf("Check(%q) accepted", p)
		}
	}
	if _, err := (Rule{}).Check("/a/b"); err == nil {
		t.Error("an empty rule accepted a target")
	}
}

func FuzzCheck(f *testing.F) {
	f.Add("/var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/v/mount", true)
	f.Add("/var/lib/kubelet/pods/../x", false)
	f.Add("/var/lib/kubelet/plugins/kubernetes.io/csi/d/h/globalmount", true)
	f.Fuzz(func(t *testing.T, p string, kubelet bool) {
		r := Rule{Root: "/var/lib/kubelet"}
		if kubelet {
			r = Rule{KubeletDir: "/var/lib/kubelet"}
		}
		if tg, err := r.CheckStaging(p); err == nil {
			if tg.Path() != p || path.Clean(p) != p || !strings.HasPrefix(p, "/var/lib/kubelet/") {
				t.Fatalf("CheckStaging(%q) accepted %+v", p, tg)
			}
			if kubelet && (tg.Leaf != "globalmount" || !strings.HasPrefix(tg.Parent, "plugins/kubernetes.io/csi/")) {
				t.Fatalf("CheckStaging(%q) accepted %+v outside kubelet's layout", p, tg)
			}
		}
		tg, err := r.Check(p)
		if err != nil {
			return
		}
		if tg.Path() != p || path.Clean(p) != p || !strings.HasPrefix(p, "/var/lib/kubelet/") {
			t.Fatalf("Check(%q) accepted %+v", p, tg)
		}
		for _, s := range strings.Split(p, "/")[1:] {
			if s == ".." || s == "." || s == "" {
				t.Fatalf("Check(%q) accepted a %q segment", p, s)
			}
		}
		if kubelet && (tg.Leaf != "mount" || !strings.HasPrefix(tg.Parent, "pods/")) {
			t.Fatalf("Check(%q) accepted %+v outside kubelet's layout", p, tg)
		}
	})
}

func TestVolumeDirGlob(t *testing.T) {
	for _, c := range []struct {
		r    Rule
		want string
	}{
		{Rule{KubeletDir: "/var/lib/kubelet/"}, "/var/lib/kubelet/pods/*/volumes/kubernetes.io~csi/*"},
		{Rule{KubeletDir: "/data/k[1]*"}, `/data/k\[1]\*/pods/*/volumes/kubernetes.io~csi/*`},
		{Rule{Root: "/tmp"}, ""},
		{Rule{KubeletDir: "relative"}, ""},
	} {
		if got := c.r.VolumeDirGlob(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.r, got, c.want)
		}
		if c.want != "" {
			if ok, err := path.Match(c.want, path.Clean(c.r.KubeletDir)+"/pods/u/volumes/kubernetes.io~csi/pv"); !ok || err != nil {
				t.Errorf("%q does not match a volume directory: %v", c.want, err)
			}
		}
	}
}

func TestVolumeHandle(t *testing.T) {
	got, err := VolumeHandle([]byte(`{"attachmentID":"","driverName":"nfsdir.csi.io","nodeName":"n","specVolID":"pvc-1","volumeHandle":"n1|a|/x|k.t|","volumeLifecycleMode":"Persistent"}`))
	if err != nil || got != "n1|a|/x|k.t|" {
		t.Errorf("VolumeHandle = %q, %v", got, err)
	}
	for _, bad := range []string{"", "{}", `{"volumeHandle":7}`, "not json"} {
		if h, err := VolumeHandle([]byte(bad)); err == nil {
			t.Errorf("VolumeHandle(%q) = %q, want an error", bad, h)
		}
	}
}
