// Package subdir expands the StorageClass subDir template into the path of a
// volume's directory relative to the share, with the same placeholders as
// kubernetes-csi/csi-driver-nfs so that StorageClasses move over unchanged.
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
}

// placeholders maps each supported placeholder to its value getter.
var placeholders = map[string]func(Vars) string{
	"pvc.metadata.name":      func(v Vars) string { return v.PVCName },
	"pvc.metadata.namespace": func(v Vars) string { return v.PVCNamespace },
	"pv.metadata.name":       func(v Vars) string { return v.PVName },
}

// Expand substitutes the placeholders in tmpl and returns the volume path.
// An empty tmpl means the PV name. The result must pass
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
	rest := tmpl
	for {
		i := strings.Index(rest, "${")
		if i < 0 {
			b.WriteString(rest)
			break
		}
		b.WriteString(rest[:i])
		j := strings.IndexByte(rest[i:], '}')
		if j < 0 {
			return "", fmt.Errorf("subDir template %q has an unterminated ${", tmpl)
		}
		name := rest[i+2 : i+j]
		get, ok := placeholders[name]
		if !ok {
			return "", fmt.Errorf("subDir template %q uses unknown placeholder ${%s}; supported: ${pvc.metadata.name}, ${pvc.metadata.namespace}, ${pv.metadata.name}", tmpl, name)
		}
		val := get(v)
		if val == "" {
			return "", fmt.Errorf("subDir template %q needs ${%s}, which the request did not carry (run csi-provisioner with --extra-create-metadata)", tmpl, name)
		}
		b.WriteString(val)
		rest = rest[i+j+1:]
	}
	out := b.String()
	if err := safepath.CheckVolumePath(out); err != nil {
		return "", fmt.Errorf("subDir %q resolves to a path that %v", tmpl, err)
	}
	return out, nil
}

// IsTemplate reports whether s contains a placeholder.
func IsTemplate(s string) bool { return strings.Contains(s, "${") }
