package volumeid

import (
	"errors"
	"strings"
	"testing"

	"github.com/nfsdir/nfsdir/pkg/export"
	"github.com/nfsdir/nfsdir/pkg/mountopts"
	"github.com/nfsdir/nfsdir/pkg/safepath"
)

func mustExport(t testing.TB, server, share string) export.Export {
	e, err := export.New(server, share)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestRoundTrip(t *testing.T) {
	key, tok := KeyForDir("pvc-1"), NewToken()
	cases := []struct{ server, share, opts string }{
		{"nfs.example.com", "/srv/nfs", "nfsvers=4.1,hard"},
		{"fd00::1", "/", ""},
		{"10.0.0.1", "/with space/and|pipe%", "sec=krb5"},
	}
	for _, c := range cases {
		id, err := New(mustExport(t, c.server, c.share), key, tok, c.opts, "")
		if err != nil {
			t.Fatal(err)
		}
		s := id.String()
		if len(s) > MaxLen {
			t.Errorf("ID %q longer than %d", s, MaxLen)
		}
		got, err := Parse(s)
		if err != nil || got != id {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", s, got, err, id)
		}
	}
}

func TestSnapshotIDsAreNeverVolumeIDs(t *testing.T) {
	vol, err := New(mustExport(t, "nfs.example.com", "/srv/nfs"), KeyForDir("pvc-1"), NewToken(), "nfsvers=4.2", "")
	if err != nil {
		t.Fatal(err)
	}
	snap := SnapshotOf(vol, KeyForSnapshot("snapshot-1"), NewToken())
	s := snap.String()
	if !strings.HasPrefix(s, "s1|") {
		t.Fatalf("snapshot ID %q does not start with s1|", s)
	}
	if got, err := ParseSnapshot(s); err != nil || got != snap {
		t.Errorf("ParseSnapshot(%q) = %+v, %v; want %+v", s, got, err, snap)
	}
	if _, err := Parse(s); !errors.Is(err, ErrNotNative) {
		t.Errorf("Parse(snapshot ID %q) = %v; want ErrNotNative", s, err)
	}
	if _, err := ParseSnapshot(vol.String()); !errors.Is(err, ErrNotNative) {
		t.Errorf("ParseSnapshot(volume ID %q) = %v; want ErrNotNative", vol.String(), err)
	}
	if KeyForSnapshot("a") == KeyForDir("a") {
		t.Error("a snapshot's key equals a directory's key")
	}
}

func TestOptionsReference(t *testing.T) {
	opts := "nfsvers=4.2,hard,timeo=600,retrans=5,rsize=1048576,wsize=1048576,sec=krb5p,xprtsec=mtls,noresvport"
	o, err := mountopts.Parse(opts)
	if err != nil {
		t.Fatal(err)
	}
	e := mustExport(t, "nfs.storage.svc", "/exports/k8s")
	id, err := ForShare(e, KeyForDir("x"), NewToken(), o)
	if err != nil {
		t.Fatal(err)
	}
	// The digest stands for the whole list; what reaches the share stays.
	if id.Options != "nfsvers=4.2,sec=krb5p,xprtsec=mtls" || id.OptionsRef != OptionsDigest(opts) {
		t.Errorf("long options not referenced: %+v", id)
	}
	if got, err := Parse(id.String()); err != nil || got != id {
		t.Errorf("Parse(%q) = %+v, %v", id.String(), got, err)
	}
	// A reach subset that does not fit either leaves the bare digest.
	long := strings.Repeat("sec=krb5p,", 10) + "nfsvers=4.2"
	id, err = New(e, KeyForDir("x"), NewToken(), long+",hard", long)
	if err != nil || id.Options != "" || id.OptionsRef != OptionsDigest(long+",hard") {
		t.Errorf("over-long reach options: %+v, %v", id, err)
	}
	if got, err := Parse(id.String()); err != nil || got != id {
		t.Errorf("Parse(%q) = %+v, %v", id.String(), got, err)
	}
	_, err = New(mustExport(t, strings.Repeat("a", 60)+".example", "/"+strings.Repeat("s", 60)), KeyForDir("x"), NewToken(), "", "")
	if err == nil || !strings.Contains(err.Error(), "too long") {
		t.Errorf("over-long export: %v", err)
	}
}

func TestParseErrors(t *testing.T) {
	valid, _ := New(mustExport(t, "s", "/x"), KeyForDir("v"), "abcdefgh", "", "")
	vs := valid.String()
	bad := map[string]string{
		"":                                    "not an nfsdir",
		"pvc-123":                             "not an nfsdir",
		"n1|s|/x|" + valid.Key + ".abcdefgh":  "fields",
		strings.Replace(vs, "|/x|", "|x|", 1): "absolute",
		strings.Replace(vs, "|/x|", "|/x/../..|", 1):     `".."`,
		strings.Replace(vs, "|/x|", "|%2Fx|", 1):         "canonical",
		strings.Replace(vs, "|/x|", "|/x%2|", 1):         "escape",
		strings.Replace(vs, "|/x|", "|/x%zz|", 1):        "escape",
		strings.Replace(vs, ".abcdefgh", ".ABCDEFGH", 1): "malformed key",
		strings.Replace(vs, ".abcdefgh", "", 1):          "malformed key",
		vs + "@xyz":                                      "options reference",
		"n1|" + strings.Repeat("a", 130):                 "bytes long",
	}
	for s, want := range bad {
		_, err := Parse(s)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) error = %v, want %q", s, err, want)
		}
	}
	if _, err := Parse("pvc-1"); !errors.Is(err, ErrNotNative) {
		t.Errorf("want ErrNotNative, got %v", err)
	}
}

func TestKeyAndToken(t *testing.T) {
	if KeyForDir("a") != KeyForDir("a") || KeyForDir("a") == KeyForDir("b") || !isBase32(KeyForDir("a"), keyLen) ||
		KeyForShared("a", "v") == KeyForDir("a") || KeyForShared("a", "v") == KeyForShared("a", "w") || !isBase32(KeyForShared("a", "v"), keyLen) {
		t.Error("KeyFor")
	}
	if a, b := NewToken(), NewToken(); a == b || !isBase32(a, tokenLen) {
		t.Errorf("tokens %q %q", a, b)
	}
}

func TestParseLegacy(t *testing.T) {
	l, err := ParseLegacy("10.0.0.1#srv/nfs#pvc-1#pvc-1#retain")
	if err != nil || l.Export.String() != "10.0.0.1:/srv/nfs" || l.SubDir != "pvc-1" || l.OnDelete != "retain" || l.UUID != "pvc-1" {
		t.Errorf("ParseLegacy = %+v, %v", l, err)
	}
	l, err = ParseLegacy("server#share#")
	if err != nil || l.SubDir != "" {
		t.Errorf("ParseLegacy root = %+v, %v", l, err)
	}
	for _, s := range []string{"a#b", "a#b#c#d#e#f", "#share#x", "s#../x#y", "a b#s#x"} {
		if _, err := ParseLegacy(s); err == nil {
			t.Errorf("ParseLegacy(%q) accepted", s)
		}
	}
}

// FuzzParse asserts that whatever the input, an accepted ID round-trips
// exactly, fits the CSI limit and names a valid export.
func FuzzParse(f *testing.F) {
	id, _ := New(export.Export{Server: "fd00::1", Share: "/srv"}, KeyForDir("x"), "abcdefgh", "nfsvers=3", "")
	f.Add(id.String())
	f.Add("n1|s|/|aaaaaaaaaaaaaaaaaaaa.bbbbbbbb|")
	f.Add("n1|s|/x/../..|aaaaaaaaaaaaaaaaaaaa.bbbbbbbb|")
	f.Add("n1|s%00|/x|aaaaaaaaaaaaaaaaaaaa.bbbbbbbb|@0123456789abcdef")
	f.Add("n1|s|/x|aaaaaaaaaaaaaaaaaaaa.bbbbbbbb|@0123456789abcdef,vers=3,port=2049")
	f.Add("n1|s|/x|aaaaaaaaaaaaaaaaaaaa.bbbbbbbb|@0123456789abcdef,")
	f.Add("10.0.0.1#srv#../../etc#u#delete")
	f.Add(SnapshotOf(id, KeyForSnapshot("snap"), "abcdefgh").String())
	f.Add("s#share#snap#snap#pvc")
	named, _ := NewNamed("main", export.Export{Server: "s", Share: "/x"}, KeyForDir("x"), "abcdefgh", "nfsvers=4.1", "")
	f.Add(named.String())
	f.Add(SnapshotOf(named, KeyForSnapshot("snap"), "abcdefgh").String())
	f.Add("n2|Main|aaaaaaaaaaaaaaaaaaaa.bbbbbbbb|")
	f.Add("n2|main|s|aaaaaaaaaaaaaaaaaaaa.bbbbbbbb|")
	f.Fuzz(func(t *testing.T, s string) {
		if l, err := ParseLegacySnapshot(s); err == nil && (safepath.CheckStaticPath(l.Archive) != nil || l.Archive == "") {
			t.Fatalf("accepted legacy snapshot %q with unsafe archive %q", s, l.Archive)
		}
		vol, verr := Parse(s)
		snap, serr := ParseSnapshot(s)
		if verr == nil && serr == nil {
			t.Fatalf("%q parses as both a volume and a snapshot ID", s)
		}
		id := vol
		if verr != nil {
			if serr != nil {
				return
			}
			id = snap
			if !id.Snapshot {
				t.Fatalf("snapshot ID %q parsed without its kind", s)
			}
		}
		if id.String() != s || len(s) > MaxLen {
			t.Fatalf("accepted %q does not round-trip: %q", s, id.String())
		}
		if id.Name != "" {
			if export.CheckName(id.Name) != nil || id.Export != (export.Export{}) {
				t.Fatalf("accepted %q with name %q, export %+v", s, id.Name, id.Export)
			}
			return
		}
		if _, err := export.New(id.Export.Server, id.Export.Share); err != nil {
			t.Fatalf("accepted %q with invalid export: %v", s, err)
		}
	})
}

// TestNamedIDs: a volume of a named export has an ID of its name, not its
// address: where the export is does not change it; it parses back with
// the name and no export; its snapshots likewise; a bad name is refused.
func TestNamedIDs(t *testing.T) {
	a, err := NewNamed("main", mustExport(t, "nfs1.example.com", "/srv/k8s"), KeyForDir("x"), "abcdefgh", "nfsvers=4.1", "")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewNamed("main", mustExport(t, "10.0.0.9", "/exports/k8s"), KeyForDir("x"), "abcdefgh", "nfsvers=4.1", "")
	if a.String() != "n2|main|"+KeyForDir("x")+".abcdefgh|nfsvers=4.1" || a.String() != b.String() {
		t.Fatalf("named IDs %q, %q", a, b)
	}
	got, err := Parse(a.String())
	if err != nil || got.Name != "main" || got.Export != (export.Export{}) || got.Key != a.Key || got.Options != "nfsvers=4.1" {
		t.Fatalf("Parse = %+v, %v", got, err)
	}
	snap := SnapshotOf(a, KeyForSnapshot("s"), "abcdefgh")
	if !strings.HasPrefix(snap.String(), "s2|main|") {
		t.Errorf("snapshot ID %q", snap)
	}
	if _, err := Parse(snap.String()); err == nil {
		t.Error("a named snapshot ID parses as a volume ID")
	}
	if s, err := ParseSnapshot(snap.String()); err != nil || s.Name != "main" || !s.Snapshot {
		t.Errorf("ParseSnapshot = %+v, %v", s, err)
	}
	if _, err := ParseSnapshot(a.String()); err == nil {
		t.Error("a named volume ID parses as a snapshot ID")
	}
	if _, err := NewNamed("Main", mustExport(t, "s", "/x"), KeyForDir("x"), "abcdefgh", "", ""); err == nil {
		t.Error("a bad name made an ID")
	}
	o, err := mountopts.Parse("nfsvers=4.2,hard,timeo=600,retrans=5,rsize=1048576,wsize=1048576,sec=krb5p,xprtsec=mtls,noresvport")
	if err != nil {
		t.Fatal(err)
	}
	id, err := ForNamedShare("main", mustExport(t, "s", "/x"), KeyForDir("x"), "abcdefgh", o)
	if err != nil || id.OptionsRef == "" || len(id.String()) > MaxLen {
		t.Errorf("long options: %q, %v", id, err)
	}
}

func TestParseLegacySnapshot(t *testing.T) {
	l, err := ParseLegacySnapshot("nfs-server.default.svc.cluster.local#share#snapshot-016f#snapshot-016f#pvc-4bcb")
	if err != nil || l.Export.Server != "nfs-server.default.svc.cluster.local" || l.Export.Share != "/share" || l.Archive != "snapshot-016f/pvc-4bcb.tar.gz" {
		t.Errorf("ParseLegacySnapshot = %+v, %v", l, err)
	}
	for _, bad := range []string{"s#share#..#..#pvc", "s#share#snap#snap#../../etc/x", "s#share#snap#snap#", "s#share#snap#snap", "-o#share#a#a#b", "s#share#a/../..#a#b"} {
		if l, err := ParseLegacySnapshot(bad); err == nil {
			t.Errorf("ParseLegacySnapshot(%q) = %+v; want an error", bad, l)
		}
	}
}
