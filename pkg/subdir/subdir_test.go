package subdir

import (
	"path"
	"regexp"
	"strings"
	"testing"

	"github.com/nfsdir/nfsdir/pkg/safepath"
)

var vars = Vars{PVCName: "data", PVCNamespace: "team-a", PVName: "pvc-123"}

func TestExpand(t *testing.T) {
	tests := []struct {
		tmpl string
		v    Vars
		want string
		err  string
	}{
		{tmpl: "", v: vars, want: "pvc-123"},
		{tmpl: "${pvc.metadata.namespace}/${pvc.metadata.name}", v: vars, want: "team-a/data"},
		{tmpl: "static/dir", v: vars, want: "static/dir"},
		{tmpl: "x-${pv.metadata.name}-y", v: vars, want: "x-pvc-123-y"},
		{tmpl: "", v: Vars{}, err: "PV name is unknown"},
		{tmpl: "${pvc.metadata.name}", v: Vars{PVName: "p"}, err: "did not carry"},
		{tmpl: "${pvc.metadata.labels.x}", v: vars, err: "unknown placeholder"},
		{tmpl: "${pvc.metadata.name", v: vars, err: "unterminated"},
		{tmpl: "/", v: vars, err: "share root"},
		{tmpl: ".", v: vars, err: "share root"},
		{tmpl: "/abs/${pv.metadata.name}", v: vars, err: "absolute"},
		{tmpl: "../${pv.metadata.name}", v: vars, err: `".."`},
		{tmpl: "${pvc.metadata.name}", v: Vars{PVCName: ".."}, err: "not a directory name"},
		{tmpl: "${pvc.metadata.namespace}/${pvc.metadata.name}", v: Vars{PVCNamespace: "..", PVCName: "x"}, err: `".."`},
		{tmpl: "${pvc.metadata.name}/x", v: Vars{PVCName: "a/../.."}, err: "single directory name"},
		{tmpl: "${pvc.metadata.name}", v: Vars{PVCName: ".nfsdir"}, err: "metadata area"},
	}
	tests = append(tests, claimTests...)
	for _, tt := range tests {
		got, err := Expand(tt.tmpl, tt.v)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("Expand(%q, %+v) = %q, %v; want error containing %q", tt.tmpl, tt.v, got, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("Expand(%q) = %q, %v; want %q", tt.tmpl, got, err, tt.want)
		}
	}
	if !IsTemplate("${x}") || IsTemplate("plain") {
		t.Error("IsTemplate")
	}
}

var placeholderRE = regexp.MustCompile(`\$\{[^}]*\}`)

var claim = &Claim{
	Labels:      map[string]string{"team": "blue", "app.kubernetes.io/name": "db", "empty": ""},
	Annotations: map[string]string{"nfs.io/storage-path": "data-1", "nested": "a/b", "up": "..", "meta": ".nfsdir", "nul": "a\x00b"},
}

var withClaim = Vars{PVCName: "data", PVCNamespace: "team-a", PVName: "pvc-123", Claim: claim}

var claimTests = []struct {
	tmpl string
	v    Vars
	want string
	err  string
}{
	{tmpl: "${pvc.metadata.labels['team']}/${pvc.metadata.name}", v: withClaim, want: "blue/data"},
	{tmpl: `${pvc.metadata.labels["app.kubernetes.io/name"]}-${pvc.metadata.annotations['nfs.io/storage-path']}`, v: withClaim, want: "db-data-1"},
	{tmpl: "${.PVC.namespace}/${.PVC.annotations.nfs.io/storage-path}", v: withClaim, want: "team-a/data-1"},
	{tmpl: "${.PVC.labels.team}-${.PVC.name}-${.PV.name}", v: withClaim, want: "blue-data-pvc-123"},
	{tmpl: "${pvc.metadata.labels['missing']}", v: withClaim, err: `claim team-a/data has no label "missing"`},
	{tmpl: "${.PVC.annotations.missing}", v: withClaim, err: `has no annotation "missing"`},
	{tmpl: "${pvc.metadata.labels['empty']}", v: withClaim, err: "is empty"},
	{tmpl: "${pvc.metadata.labels['team']}", v: vars, err: "--read-claim-metadata"},
	{tmpl: "${pvc.metadata.annotations['nested']}", v: withClaim, err: "single directory name"},
	{tmpl: "x/${pvc.metadata.annotations['up']}", v: withClaim, err: "not a directory name"},
	{tmpl: "${pvc.metadata.annotations['meta']}", v: withClaim, err: "metadata area"},
	{tmpl: "${pvc.metadata.annotations['nul']}", v: withClaim, err: "NUL"},
	{tmpl: "${pvc.metadata.labels[team]}", v: withClaim, err: "unknown placeholder"},
	{tmpl: "${pvc.metadata.labels['team\"]}", v: withClaim, err: "unknown placeholder"},
	{tmpl: "${pvc.metadata.labels['a b']}", v: withClaim, err: "unknown placeholder"},
	{tmpl: "${pvc.metadata.labels['/x']}", v: withClaim, err: "unknown placeholder"},
	{tmpl: "${.PVC.labels.}", v: withClaim, err: "unknown placeholder"},
}

func TestNeedsClaim(t *testing.T) {
	for tmpl, want := range map[string]bool{
		"":                                   false,
		"${pvc.metadata.name}/x":             false,
		"a/${pvc.metadata.labels['team']}":   true,
		"${.PVC.annotations.nfs.io/path}":    true,
		"${pvc.metadata.labels[team]}":       false, // Expand reports it
		"${pvc.metadata.name":                false,
		"${.PVC.namespace}/${.PVC.labels.x}": true,
	} {
		if got := NeedsClaim(tmpl); got != want {
			t.Errorf("NeedsClaim(%q) = %v, want %v", tmpl, got, want)
		}
	}
}

func TestNamesPV(t *testing.T) {
	for tmpl, want := range map[string]bool{
		"":                              true,
		"${pv.metadata.name}":           true,
		"${.PVC.namespace}/${.PV.name}": true,
		"${pvc.metadata.namespace}/${pvc.metadata.name}": false,
		"team/${.PVC.labels.app}":                        false,
		"fixed":                                          false,
	} {
		if got := NamesPV(tmpl); got != want {
			t.Errorf("NamesPV(%q) = %v, want %v", tmpl, got, want)
		}
	}
}

// FuzzExpand asserts that whatever the template and the claim's names, an
// accepted result stays strictly inside the share and outside the metadata
// area.
func FuzzExpand(f *testing.F) {
	f.Add("${pvc.metadata.namespace}/${pvc.metadata.name}", "ns", "name", "pv")
	f.Add("${pvc.metadata.name}", "..", "..", "pv")
	f.Add("a/${pv.metadata.name}/../..", "", "", "x")
	f.Add("", "", "", "../../etc")
	f.Add("${pvc.metadata.name}", "", "/", "")
	f.Add("${pvc.metadata.name}", "", ".nfsdir/trash", "")
	f.Add("${pvc.metadata.annotations['k']}/x", "ns", "../..", "pv")
	f.Add("${.PVC.labels.k}", "ns", "a/b", "pv")
	f.Fuzz(func(t *testing.T, tmpl, ns, name, pv string) {
		// The claim's labels and annotations are as hostile as its name.
		c := &Claim{Labels: map[string]string{"k": name}, Annotations: map[string]string{"k": name, "nfs.io/p": pv}}
		out, err := Expand(tmpl, Vars{PVCName: name, PVCNamespace: ns, PVName: pv, Claim: c})
		if err != nil {
			return
		}
		if safepath.CheckVolumePath(out) != nil {
			t.Fatalf("accepted %q fails the path rules", out)
		}
		// Whatever the claim's owner writes, the template alone decides
		// how deep the directory is.
		if tmpl != "" && strings.Count(out, "/") != strings.Count(placeholderRE.ReplaceAllString(tmpl, ""), "/") {
			t.Fatalf("template %q with claim values made %q: another depth", tmpl, out)
		}
		j := path.Join("/share", out)
		if !strings.HasPrefix(j, "/share/") || strings.HasPrefix(j, "/share/.nfsdir/") || j == "/share/.nfsdir" {
			t.Fatalf("accepted %q escapes to %q", out, j)
		}
	})
}
