package params

import (
	"strings"
	"testing"

	"github.com/nfsdir/nfsdir/pkg/export"
	"github.com/nfsdir/nfsdir/pkg/mountopts"
	"github.com/nfsdir/nfsdir/pkg/subdir"
)

func TestParseCreate(t *testing.T) {
	c, err := ParseCreate(map[string]string{
		"Server": "fd00::1", "SHARE": "/srv/", "subDir": "${pvc.metadata.namespace}/${pvc.metadata.name}",
		"mountPermissions": "02770", "onDelete": "Archive", "uid": "1000", "gid": "2000", "keepSetIDOnRestore": "true",
		KeyPVCName: "data", KeyPVCNamespace: "ns", KeyPVName: "pvc-1",
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Export.String() != "[fd00::1]:/srv" || c.SubDir != "ns/data" || c.Mode != 0o2770 ||
		c.OnDelete != Archive || c.UID != 1000 || c.GID != 2000 || !c.KeepSetID {
		t.Errorf("ParseCreate = %+v", c)
	}
	d, err := ParseCreate(map[string]string{"server": "s", "share": "/e", KeyPVName: "pvc-2"}, nil)
	if err != nil || d.SubDir != "pvc-2" || d.UID != -1 || d.GID != -1 || d.Mode != 0 || d.OnDelete != "" || d.KeepSetID {
		t.Errorf("defaults = %+v, %v", d, err)
	}
}

func TestParseCreateWithClaimMetadata(t *testing.T) {
	p := map[string]string{"server": "s", "share": "/e", "SubDir": "${pvc.metadata.labels['team']}/${pvc.metadata.name}",
		KeyPVCName: "data", KeyPVCNamespace: "ns", KeyPVName: "pvc-1"}
	if !NeedsClaim(p) || NeedsClaim(map[string]string{"subDir": "${pvc.metadata.name}"}) {
		t.Error("NeedsClaim")
	}
	c, err := ParseCreate(p, &subdir.Claim{Labels: map[string]string{"team": "blue"}})
	if err != nil || c.SubDir != "blue/data" {
		t.Errorf("ParseCreate = %q, %v", c.SubDir, err)
	}
	if _, err := ParseCreate(p, &subdir.Claim{}); err == nil || !strings.Contains(err.Error(), `no label "team"`) {
		t.Errorf("missing label: %v", err)
	}
}

func TestParseCreateErrors(t *testing.T) {
	base := func(kv ...string) map[string]string {
		m := map[string]string{"server": "s", "share": "/e", KeyPVName: "pv"}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	tests := map[string]map[string]string{
		`unknown parameter "color"`:                    base("color", "red"),
		"given twice":                                  base("Server", "t"),
		`"share" "e" must be an absolute`:              base("share", "e"),
		"resolves to the share root":                   base("subDir", "/"),
		`".." segments`:                                base("subDir", "../x"),
		"metadata area":                                base("subDir", ".nfsdir"),
		"must be an octal mode":                        base("mountPermissions", "999"),
		"octal mode such":                              base("mountPermissions", "077777"),
		"onDelete \"purge\"":                           base("onDelete", "purge"),
		`"uid" "-1"`:                                   base("uid", "-1"),
		`"gid" "x"`:                                    base("gid", "x"),
		`"keepSetIDOnRestore" "yes"`:                   base("keepSetIDOnRestore", "yes"),
		`parameter "server" is required`:               {"share": "/e"},
		"did not carry":                                base("subDir", "${pvc.metadata.name}"),
		"needs a subDir template that names the claim": base("reuseDirectory", "true"),
		"a PV's name, the default subDir":              base("reuseDirectory", "true", "subDir", "x/${pv.metadata.name}"),
		"does not apply to shared directories":         base("reuseDirectory", "true", "subDir", "fixed", "allowSharedSubDir", "true", "onDelete", "retain"),
		`cannot be used with "copyAgent"`:              base("reuseDirectory", "true", "subDir", "fixed", "copyAgent", "agent:7443"),
		`"reuseDirectory" "maybe"`:                     base("reuseDirectory", "maybe"),
		`leave out "server" and "share"`:               base("export", "main"),
		`export name "Main"`:                           {"export": "Main", KeyPVName: "pv"},
	}
	for want, m := range tests {
		if _, err := ParseCreate(m, nil); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseCreate(%v) error = %v, want %q", m, err, want)
		}
	}
}

func TestParseCreateReuseDirectory(t *testing.T) {
	p := map[string]string{"server": "s", "share": "/e", "reuseDirectory": "true",
		"subDir": "${pvc.metadata.namespace}/${pvc.metadata.name}", KeyPVName: "pvc-1", KeyPVCName: "data", KeyPVCNamespace: "team"}
	c, err := ParseCreate(p, nil)
	if err != nil || !c.Reuse || c.SubDir != "team/data" {
		t.Fatalf("ParseCreate = %+v, %v; want Reuse and team/data", c, err)
	}
	p["reuseDirectory"] = "false"
	if c, err := ParseCreate(p, nil); err != nil || c.Reuse {
		t.Fatalf("reuseDirectory false: %+v, %v", c, err)
	}
}

// TestNamedExports: a class may name its export instead of giving server
// and share; volume attributes hold the name, and the address it had.
func TestNamedExports(t *testing.T) {
	c, err := ParseCreate(map[string]string{"export": "main", KeyPVName: "pvc-1"}, nil)
	if err != nil || c.ExportName != "main" || c.Export != (export.Export{}) || c.SubDir != "pvc-1" {
		t.Fatalf("ParseCreate = %+v, %v", c, err)
	}
	v, err := ParseVolume(map[string]string{"export": "main", "server": "10.0.0.1", "share": "/srv", "subDir": "a"})
	if err != nil || v.ExportName != "main" || v.Export != (export.Export{Server: "10.0.0.1", Share: "/srv"}) {
		t.Fatalf("ParseVolume = %+v, %v", v, err)
	}
	v, err = ParseVolume(map[string]string{"export": "main", "subDir": "a"})
	if err != nil || v.ExportName != "main" || v.Export != (export.Export{}) {
		t.Fatalf("ParseVolume of a name alone = %+v, %v", v, err)
	}
	if _, err := ParseVolume(map[string]string{"export": "main", "server": "10.0.0.1"}); err == nil {
		t.Error("a server without its share was accepted")
	}
}

func TestPools(t *testing.T) {
	c, err := ParseCreate(map[string]string{"export": "fast-1, fast-2,slow", "drainExports": "slow", "fillThreshold": "85%", KeyPVName: "pvc-1"}, nil)
	if err != nil || c.ExportName != "" || strings.Join(c.Placement.Pool, " ") != "fast-1 fast-2 slow" ||
		strings.Join(c.Placement.Drain, " ") != "slow" || c.Placement.FillPercent != 85 || !c.Placement.Chooses() {
		t.Fatalf("ParseCreate = %+v, %v", c, err)
	}
	c, err = ParseCreate(map[string]string{"server": "s", "share": "/e", "fillThreshold": "90", KeyPVName: "pvc-1"}, nil)
	if err != nil || c.Placement.FillPercent != 90 || !c.Placement.Chooses() || c.Export.Server != "s" {
		t.Fatalf("a threshold on a server and share: %+v, %v", c, err)
	}
	if c, _ := ParseCreate(map[string]string{"export": "one", KeyPVName: "pvc-1"}, nil); c.Placement.Chooses() {
		t.Error("a class of one export without limits reads its space")
	}
	for _, bad := range []map[string]string{
		{"export": "a,b", "drainExports": "c"},
		{"export": "a,b", "fillThreshold": "0"},
		{"export": "a,b", "fillThreshold": "101"},
		{"export": "a,b", "fillThreshold": "most"},
		{"export": "a,a"},
		{"export": "a,b", "share": ""},
		{"export": "a,b", "allowSharedSubDir": "true", "onDelete": "retain"},
		{"server": "s", "share": "/e", "drainExports": "a"},
	} {
		bad[KeyPVName] = "pvc-1"
		if c, err := ParseCreate(bad, nil); err == nil {
			t.Errorf("ParseCreate(%v) = %+v", bad, c)
		}
	}
	if _, err := ParseVolume(map[string]string{"export": "a,b", "subDir": "x"}); err == nil {
		t.Error("volume attributes of two exports were accepted")
	}
	if e, pl, err := ParsePlacement(map[string]string{"Export": "a,b", "SubDir": "${pvc.metadata.name}"}); err != nil || len(pl.Pool) != 2 || e != (export.Export{}) {
		t.Errorf("ParsePlacement = %v, %+v, %v", e, pl, err)
	}
}

func TestParseVolume(t *testing.T) {
	v, err := ParseVolume(map[string]string{"server": "10.0.0.1", "share": "/e", "subDir": "/a/b/",
		"mountOptions": "nfsvers=3,hard", "onDelete": "retain", "csi.storage.k8s.io/pod.name": "p"})
	if err != nil || v.Export.Source(v.SubDir) != "10.0.0.1:/e/a/b" || v.MountOptions.String() != "nfsvers=3,hard" {
		t.Errorf("ParseVolume = %+v, %v", v, err)
	}
	// What csi-provisioner stores in every PV it creates, besides the
	// volume context CreateVolume returned.
	prov, err := ParseVolume(map[string]string{"server": "s", "share": "/e", "subDir": "d",
		"storage.kubernetes.io/csiProvisionerIdentity": "1764465000000-8081-nfsdir.csi.io"})
	if err != nil || prov.Export.Source(prov.SubDir) != "s:/e/d" {
		t.Errorf("attributes of a provisioned PV: %+v, %v", prov, err)
	}
	root, err := ParseVolume(map[string]string{"server": "s", "share": "/e"})
	if err != nil || root.SubDir != "" {
		t.Errorf("static root = %+v, %v", root, err)
	}
	for want, m := range map[string]map[string]string{
		`".." segments`: {"server": "s", "share": "/e", "subDir": "a/../../b"},
		"template":      {"server": "s", "share": "/e", "subDir": "${pv.metadata.name}"},
		"unknown":       {"server": "s", "share": "/e", "foo": "1"},
		"mountOptions":  {"server": "s", "share": "/e", "mountOptions": "a b"},
		"required":      {"share": "/e"},
	} {
		if _, err := ParseVolume(m); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseVolume(%v) = %v, want %q", m, err, want)
		}
	}
}

// FuzzParseCreate asserts that any accepted parameter set yields a volume
// path strictly inside the share.
func FuzzParseCreate(f *testing.F) {
	f.Add("s", "/e", "${pvc.metadata.namespace}/${pvc.metadata.name}", "ns", "n", "pv")
	f.Add("fd00::1", "/", "../..", "", "", "pv")
	f.Add("s", "/e/../..", "", "", "", "../../etc")
	f.Add("s#x", "e", "/", "..", "..", "")
	f.Fuzz(func(t *testing.T, server, share, sub, ns, name, pv string) {
		c, err := ParseCreate(map[string]string{"server": server, "share": share, "subDir": sub,
			KeyPVCNamespace: ns, KeyPVCName: name, KeyPVName: pv}, &subdir.Claim{Labels: map[string]string{"k": name}})
		if err != nil {
			return
		}
		src := c.Export.Source(c.SubDir)
		if !strings.HasPrefix(src, c.Export.String()+"/") && !(c.Export.Share == "/" && strings.HasPrefix(src, c.Export.String())) {
			t.Fatalf("source %q escapes export %q", src, c.Export)
		}
		if strings.Contains("/"+c.SubDir+"/", "/../") || c.SubDir == "" {
			t.Fatalf("accepted subDir %q", c.SubDir)
		}
	})
}

func TestParseMutable(t *testing.T) {
	m, err := ParseMutable(map[string]string{"OnDelete": "Retain", "mountOptions": "nfsvers=4.2,nconnect=4"})
	if err != nil || m.OnDelete != Retain || !m.HasMountOptions || m.MountOptions.String() != "nfsvers=4.2,nconnect=4" {
		t.Fatalf("ParseMutable = %+v, %v", m, err)
	}
	if m, err := ParseMutable(map[string]string{"mountOptions": ""}); err != nil || !m.HasMountOptions || len(m.MountOptions) != 0 {
		t.Fatalf("clearing mount options: %+v, %v", m, err)
	}
	for p, want := range map[string]string{
		"subDir":       `"subDir" cannot change`,
		"uid":          `"uid" cannot change`,
		"XXX_FakeKey":  `unknown parameter "XXX_FakeKey"`,
		"onDelete":     `onDelete "x" is not one of`,
		"mountOptions": `"mountOptions"`,
	} {
		v := "x"
		if p == "mountOptions" {
			v = "bg"
		}
		if _, err := ParseMutable(map[string]string{p: v}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseMutable(%s=%s) = %v, want an error naming %s", p, v, err, want)
		}
	}
	if _, err := ParseMutable(map[string]string{"onDelete": "retain", "ONDELETE": "delete"}); err == nil {
		t.Error("a key given twice in different case was accepted")
	}
	for v, want := range map[string]string{"nfs2.example.com": "nfs2.example.com", "10.0.0.2": "10.0.0.2", "[fd00::2]": "fd00::2", "": ""} {
		if m, err := ParseMutable(map[string]string{"mountServer": v}); err != nil || !m.HasMountServer || m.MountServer != want {
			t.Errorf("mountServer %q: %+v, %v", v, m, err)
		}
	}
	for _, v := range []string{"a b", "host:/x", "-o", "a/b"} {
		if _, err := ParseMutable(map[string]string{"mountServer": v}); err == nil || !strings.Contains(err.Error(), "mountServer") {
			t.Errorf("mountServer %q accepted: %v", v, err)
		}
	}
}

func FuzzParseMutable(f *testing.F) {
	f.Add("onDelete", "archive", "mountOptions", "nfsvers=4.1,hard")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		m, err := ParseMutable(map[string]string{k1: v1, k2: v2})
		if err != nil {
			return
		}
		if m.OnDelete != "" {
			if _, err := ParseOnDelete(string(m.OnDelete)); err != nil {
				t.Fatalf("accepted policy %q does not parse", m.OnDelete)
			}
		}
		if m.HasMountOptions {
			if _, err := mountopts.Parse(m.MountOptions.String()); err != nil {
				t.Fatalf("accepted options %q do not parse again: %v", m.MountOptions, err)
			}
		}
		if m.MountServer != "" {
			if e, err := export.New(m.MountServer, "/"); err != nil || e.Server != m.MountServer {
				t.Fatalf("accepted mountServer %q does not parse again: %+v, %v", m.MountServer, e, err)
			}
		}
	})
}

// TestUnknownKeysListWhatTheCallerKnows: the message for an unknown key
// lists the keys of that kind, spelled as documented: a StorageClass's
// parameters include quotaAgent, volume attributes do not.
func TestUnknownKeysListWhatTheCallerKnows(t *testing.T) {
	_, err := ParseCreate(map[string]string{"server": "s", "share": "/x", "colour": "red"}, nil)
	if err == nil || !strings.Contains(err.Error(), `unknown parameter "colour"`) || !strings.Contains(err.Error(), "quotaAgent") || !strings.Contains(err.Error(), "allowSharedSubDir") {
		t.Errorf("ParseCreate: %v", err)
	}
	_, err = ParseVolume(map[string]string{"server": "s", "share": "/x", "colour": "red"})
	if err == nil || !strings.Contains(err.Error(), `unknown volume attribute "colour"`) || strings.Contains(err.Error(), "quotaAgent") || !strings.Contains(err.Error(), "mountOptions") {
		t.Errorf("ParseVolume: %v", err)
	}
}

func TestStrictMountOptions(t *testing.T) {
	base := map[string]string{"server": "nfs.example", "share": "/export", "subDir": "v"}
	with := func(v string) map[string]string {
		m := map[string]string{"strictMountOptions": v}
		for k, x := range base {
			m[k] = x
		}
		return m
	}
	if c, err := ParseCreate(with("true"), nil); err != nil || !c.StrictOptions {
		t.Errorf("StorageClass: %+v, %v", c, err)
	}
	if v, err := ParseVolume(with("TRUE")); err != nil || !v.StrictOptions {
		t.Errorf("volume attribute: %+v, %v", v, err)
	}
	if v, err := ParseVolume(base); err != nil || v.StrictOptions {
		t.Errorf("by default: %+v, %v", v, err)
	}
	for _, bad := range []string{"yes", "", "1x"} {
		if _, err := ParseCreate(with(bad), nil); err == nil || !strings.Contains(err.Error(), "strictMountOptions") {
			t.Errorf("StorageClass %q: %v", bad, err)
		}
		if _, err := ParseVolume(with(bad)); err == nil || !strings.Contains(err.Error(), "strictMountOptions") {
			t.Errorf("volume attribute %q: %v", bad, err)
		}
	}
}
