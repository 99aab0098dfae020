// Package targetpath decides, without I/O, which publish target paths the
// node service may act on. Under Kubernetes that is only kubelet's layout,
// <kubeletDir>/pods/<pod UID>/volumes/kubernetes.io~csi/<volume>/mount (the
// same for persistent and inline ephemeral volumes); other container
// orchestrators may name a root below which any target is accepted. Either
// way a target is a clean absolute path without "." or ".." segments; that
// no component is a symlink is checked when the path is used (targetdir).
package targetpath

import (
	"encoding/json"
	"fmt"
	"path"
	"strings"
)

// Rule is where targets may be. Exactly one of KubeletDir and Root is set.
type Rule struct {
	// KubeletDir is kubelet's root directory (--root-dir).
	KubeletDir string
	// Root accepts any target strictly below it.
	Root string
}

// Target is a checked target path: Base, a directory the administrator
// configured (trusted as it is), Parent, the path from Base to the
// target's parent ("" for Base itself), and Leaf, the target's last
// component.
type Target struct {
	Base, Parent, Leaf string
}

// Path returns the target's full path.
func (t Target) Path() string { return path.Join(t.Base, t.Parent, t.Leaf) }

// kubeletForm is the layout below KubeletDir; "*" is one segment of any name.
var kubeletForm = []string{"pods", "*", "volumes", "kubernetes.io~csi", "*", "mount"}

// maxPath is PATH_MAX.
const maxPath = 4096

// stagingForm is kubelet's staging path of a CSI volume below KubeletDir:
// plugins/kubernetes.io/csi/<driver>/<sha256 of the volume handle>/globalmount
// (and, from older kubelets, .../csi/pv/<PV name>/globalmount).
var stagingForm = []string{"plugins", "kubernetes.io", "csi", "*", "*", "globalmount"}

// Check returns the target if p is allowed by the rule, or an error saying
// why not.
func (r Rule) Check(p string) (Target, error) {
	return r.check(p, kubeletForm, "a kubelet CSI volume path (%s/pods/<pod UID>/volumes/kubernetes.io~csi/<volume>/mount)")
}

// CheckStaging returns the staging path if p is allowed by the rule: under
// Kubernetes only kubelet's staging layout, otherwise any path below Root.
func (r Rule) CheckStaging(p string) (Target, error) {
	return r.check(p, stagingForm, "a kubelet CSI staging path (%s/plugins/kubernetes.io/csi/<driver>/<volume hash>/globalmount)")
}

func (r Rule) check(p string, form []string, want string) (Target, error) {
	base := r.KubeletDir
	if base == "" {
		base = r.Root
	}
	switch {
	case base == "" || !path.IsAbs(base):
		return Target{}, fmt.Errorf("no target root is configured")
	case p == "":
		return Target{}, fmt.Errorf("target path is required")
	case len(p) >= maxPath:
		return Target{}, fmt.Errorf("target path is %d bytes long", len(p))
	case !path.IsAbs(p):
		return Target{}, fmt.Errorf("target path %q must be absolute", p)
	case strings.ContainsRune(p, 0):
		return Target{}, fmt.Errorf("target path %q contains a NUL byte", p)
	}
	prefix := strings.TrimSuffix(base, "/") + "/"
	rel, ok := strings.CutPrefix(p, prefix)
	if !ok || rel == "" {
		return Target{}, fmt.Errorf("target path %q is not below %s", p, base)
	}
	segs := strings.Split(rel, "/")
	for _, s := range segs {
		if s == "" || s == "." || s == ".." {
			return Target{}, fmt.Errorf("target path %q must be clean: no empty, \".\" or \"..\" segments", p)
		}
	}
	if r.KubeletDir != "" {
		ok := len(segs) == len(form)
		for i := 0; ok && i < len(segs); i++ {
			ok = form[i] == "*" || form[i] == segs[i]
		}
		if !ok {
			return Target{}, fmt.Errorf("path %q is not "+want, p, base)
		}
	}
	return Target{Base: path.Clean(base), Parent: strings.Join(segs[:len(segs)-1], "/"), Leaf: segs[len(segs)-1]}, nil
}

// VolumeDirGlob returns a filepath.Glob pattern matching kubelet's CSI
// volume directories (each holds the target "mount" and kubelet's
// vol_data.json), or "" for a Root rule, which has no such layout.
func (r Rule) VolumeDirGlob() string {
	if r.KubeletDir == "" || !path.IsAbs(r.KubeletDir) {
		return ""
	}
	var b strings.Builder
	for _, c := range path.Clean(r.KubeletDir) {
		if strings.ContainsRune(`*?[\`, c) {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String() + "/" + strings.Join(kubeletForm[:len(kubeletForm)-1], "/")
}

// VolDataFile is the file kubelet writes next to each CSI target.
const VolDataFile = "vol_data.json"

// MaxVolData bounds how much of a vol_data.json is read.
const MaxVolData = 64 << 10

// VolumeHandle returns the volume ID kubelet recorded in the contents of a
// vol_data.json.
func VolumeHandle(volData []byte) (string, error) {
	h, _, err := VolData(volData)
	return h, err
}

// VolData returns the volume ID and the driver's name kubelet recorded in
// the contents of a vol_data.json (the name is "" when it names none).
func VolData(volData []byte) (handle, driver string, err error) {
	var d struct {
		VolumeHandle string `json:"volumeHandle"`
		DriverName   string `json:"driverName"`
	}
	if err := json.Unmarshal(volData, &d); err != nil {
		return "", "", fmt.Errorf("%s: %w", VolDataFile, err)
	}
	if d.VolumeHandle == "" {
		return "", "", fmt.Errorf("%s names no volumeHandle", VolDataFile)
	}
	return d.VolumeHandle, d.DriverName, nil
}
