package subdir

import (
	"path"
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
		{tmpl: "${pvc.metadata.name}", v: Vars{PVCName: ".."}, err: "share root"},
		{tmpl: "${pvc.metadata.namespace}/${pvc.metadata.name}", v: Vars{PVCNamespace: "..", PVCName: "x"}, err: `".."`},
		{tmpl: "${pvc.metadata.name}/x", v: Vars{PVCName: "a/../.."}, err: `".."`},
		{tmpl: "${pvc.metadata.name}", v: Vars{PVCName: ".nfsdir"}, err: "metadata area"},
	}
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
	f.Fuzz(func(t *testing.T, tmpl, ns, name, pv string) {
		out, err := Expand(tmpl, Vars{PVCName: name, PVCNamespace: ns, PVName: pv})
		if err != nil {
			return
		}
		if safepath.CheckVolumePath(out) != nil {
			t.Fatalf("accepted %q fails the path rules", out)
		}
		j := path.Join("/share", out)
		if !strings.HasPrefix(j, "/share/") || strings.HasPrefix(j, "/share/.nfsdir/") || j == "/share/.nfsdir" {
			t.Fatalf("accepted %q escapes to %q", out, j)
		}
	})
}
