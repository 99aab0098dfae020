// Package subdir expands the StorageClass subDir template into the path of a
// volume's directory relative to the share, with the same placeholders as
// kubernetes-csi/csi-driver-nfs so that StorageClasses move over unchanged,
// plus the claim's labels and annotations as nfs-subdir-external-provisioner's
// pathPattern allows.
package subdir

import (
	"fmt"
	"strings"

	"github.com/nfsdir/nfsdir/pkg/safepath"
)

// Vars are the values a template may refer to. Empty fields are unknown:
// a template that uses one fails, naming the provisioner flag that supplies it.
type Vars struct {
	PVCName      string // ${pvc.metadata.name}
	PVCNamespace string // ${pvc.metadata.namespace}
	PVName       string // ${pv.metadata.name}
	// Claim holds the claim's labels and annotations when the caller read
	// them (the template needs them: NeedsClaim); nil otherwise.
	Claim *Claim
}

// Claim is the metadata of a PersistentVolumeClaim a template may use.
type Claim struct {
	Labels, Annotations map[string]string
}

// A placeholder is one ${...} of a template, resolved.
type placeholder struct {
	// kind is "name", "namespace", "pv", "label" or "annotation".
	kind string
	key  string // the label or annotation key
}

// Syntax of the placeholders. csi-driver-nfs's form first, then
// nfs-subdir-external-provisioner's (${.PVC.name}, ${.PVC.labels.key}).
const (
	labelsPrefix      = "pvc.metadata.labels["
	annotationsPrefix = "pvc.metadata.annotations["
	subdirLabels      = ".PVC.labels."
	subdirAnnotations = ".PVC.annotations."
)

var fixed = map[string]string{
	"pvc.metadata.name":      "name",
	"pvc.metadata.namespace": "namespace",
	"pv.metadata.name":       "pv",
	".PVC.name":              "name",
	".PVC.namespace":         "namespace",
	".PV.name":               "pv",
}

const supported = "${pvc.metadata.name}, ${pvc.metadata.namespace}, ${pv.metadata.name}, " +
	"${pvc.metadata.labels['key']}, ${pvc.metadata.annotations['key']} " +
	"(or nfs-subdir-external-provisioner's ${.PVC.name}, ${.PVC.namespace}, ${.PVC.labels.key}, ${.PVC.annotations.key})"

// parsePlaceholder parses the text between ${ and }.
func parsePlaceholder(s string) (placeholder, bool) {
	if k, ok := fixed[s]; ok {
		return placeholder{kind: k}, true
	}
	for _, f := range []struct{ prefix, kind string }{{labelsPrefix, "label"}, {annotationsPrefix, "annotation"}} {
		rest, ok := strings.CutPrefix(s, f.prefix)
		if !ok || len(rest) < 3 || rest[len(rest)-1] != ']' {
			continue
		}
		q := rest[0]
		inner := rest[1 : len(rest)-1]
		if (q != '\'' && q != '"') || len(inner) < 2 || inner[len(inner)-1] != q {
			return placeholder{}, false
		}
		key := inner[:len(inner)-1]
		if !validKey(key) {
			return placeholder{}, false
		}
		return placeholder{kind: f.kind, key: key}, true
	}
	for _, f := range []struct{ prefix, kind string }{{subdirLabels, "label"}, {subdirAnnotations, "annotation"}} {
		if key, ok := strings.CutPrefix(s, f.prefix); ok && validKey(key) {
			return placeholder{kind: f.kind, key: key}, true
		}
	}
	return placeholder{}, false
}

// validKey reports whether k has the shape of a Kubernetes label or
// annotation key: an optional DNS prefix and "/", then a name of
// letters, digits, '-', '_' and '.'.
func validKey(k string) bool {
	if k == "" || len(k) > 316 {
		return false
	}
	prefix, name, found := strings.Cut(k, "/")
	if !found {
		name, prefix = prefix, ""
	} else if prefix == "" {
		return false
	}
	if name == "" || len(name) > 63 {
		return false
	}
	for _, r := range prefix + name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
		default:
			return false
		}
	}
	return true
}

// walk calls fn with the literal text and the placeholders of tmpl in order.
func walk(tmpl string, lit func(string), ph func(string, placeholder) error) error {
	rest := tmpl
	for {
		i := strings.Index(rest, "${")
		if i < 0 {
			lit(rest)
			return nil
		}
		lit(rest[:i])
		j := strings.IndexByte(rest[i:], '}')
		if j < 0 {
			return fmt.Errorf("subDir template %q has an unterminated ${", tmpl)
		}
		name := rest[i+2 : i+j]
		p, ok := parsePlaceholder(name)
		if !ok {
			return fmt.Errorf("subDir template %q uses unknown placeholder ${%s}; supported: %s", tmpl, name, supported)
		}
		if err := ph(name, p); err != nil {
			return err
		}
		rest = rest[i+j+1:]
	}
}

// NeedsClaim reports whether tmpl refers to the claim's labels or
// annotations, which the caller must then read and pass in Vars.Claim. A
// template that does not parse needs nothing: Expand reports its error.
func NeedsClaim(tmpl string) bool {
	needs := false
	_ = walk(tmpl, func(string) {}, func(_ string, p placeholder) error {
		needs = needs || p.kind == "label" || p.kind == "annotation"
		return nil
	})
	return needs
}

// NamesPV reports whether tmpl makes a path of the PV's name (an empty
// tmpl does): such a path differs for every volume, so it never leads a
// new volume to an older one's directory (params' reuseDirectory).
func NamesPV(tmpl string) bool {
	if tmpl == "" {
		return true
	}
	pv := false
	_ = walk(tmpl, func(string) {}, func(_ string, p placeholder) error {
		pv = pv || p.kind == "pv"
		return nil
	})
	return pv
}

// Expand substitutes the placeholders in tmpl and returns the volume path.
// An empty tmpl means the PV name. Every placeholder must expand to a
// single directory name (no "/", not "." or ".."): annotations are written
// by the claim's owner, who must not pick where in the share the volume
// goes beyond the one name the template gives them. The result must pass
// safepath.CheckVolumePath; otherwise, or when a placeholder is unknown or
// has no value, Expand returns an error for the operator.
func Expand(tmpl string, v Vars) (string, error) {
	if tmpl == "" {
		if v.PVName == "" {
			return "", fmt.Errorf("subDir is not set and the PV name is unknown (run csi-provisioner with --extra-create-metadata)")
		}
		tmpl = "${pv.metadata.name}"
	}
	var b strings.Builder
	err := walk(tmpl, func(s string) { b.WriteString(s) }, func(name string, p placeholder) error {
		val, err := value(tmpl, name, p, v)
		if err != nil {
			return err
		}
		if err := checkValue(val); err != nil {
			return fmt.Errorf("subDir template %q: ${%s} is %q, which %v", tmpl, name, val, err)
		}
		b.WriteString(val)
		return nil
	})
	if err != nil {
		return "", err
	}
	out := b.String()
	if err := safepath.CheckVolumePath(out); err != nil {
		return "", fmt.Errorf("subDir %q resolves to a path that %v", tmpl, err)
	}
	return out, nil
}

// value returns the value of one placeholder.
func value(tmpl, name string, p placeholder, v Vars) (string, error) {
	var val string
	switch p.kind {
	case "name":
		val = v.PVCName
	case "namespace":
		val = v.PVCNamespace
	case "pv":
		val = v.PVName
	default:
		if v.Claim == nil {
			return "", fmt.Errorf("subDir template %q needs ${%s}, and the claim's metadata was not read (enable the controller's --read-claim-metadata: chart value controller.claimMetadata.enabled)", tmpl, name)
		}
		m, what := v.Claim.Labels, "label"
		if p.kind == "annotation" {
			m, what = v.Claim.Annotations, "annotation"
		}
		var ok bool
		if val, ok = m[p.key]; !ok {
			return "", fmt.Errorf("subDir template %q needs ${%s}, and claim %s/%s has no %s %q: set it on the claim", tmpl, name, v.PVCNamespace, v.PVCName, what, p.key)
		}
		if val == "" {
			return "", fmt.Errorf("subDir template %q needs ${%s}, and the %s %q of claim %s/%s is empty", tmpl, name, what, p.key, v.PVCNamespace, v.PVCName)
		}
		return val, nil
	}
	if val == "" {
		return "", fmt.Errorf("subDir template %q needs ${%s}, which the request did not carry (run csi-provisioner with --extra-create-metadata)", tmpl, name)
	}
	return val, nil
}

// checkValue refuses a value that is not one directory name.
func checkValue(val string) error {
	switch {
	case val == "." || val == "..":
		return fmt.Errorf("is not a directory name")
	case strings.ContainsAny(val, "/\x00"):
		return fmt.Errorf("holds a '/' or a NUL: each placeholder must expand to a single directory name")
	case len(val) > 255:
		return fmt.Errorf("is longer than a directory name may be (255 bytes)")
	}
	return nil
}

// IsTemplate reports whether s contains a placeholder.
func IsTemplate(s string) bool { return strings.Contains(s, "${") }
