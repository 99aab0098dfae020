package export

import (
	"strings"
	"testing"
)

func TestNew(t *testing.T) {
	good := []struct{ server, share, source string }{
		{"nfs.example.com", "/srv/nfs", "nfs.example.com:/srv/nfs"},
		{"10.0.0.5", "/srv/nfs/", "10.0.0.5:/srv/nfs"},
		{"fd00::1", "/", "[fd00::1]:/"},
		{"[fd00:0::1]", "//x//y", "[fd00::1]:/x/y"},
		{"::ffff:10.0.0.1", "/e", "[::ffff:10.0.0.1]:/e"},
		{"nfs-server-1", "/e", "nfs-server-1:/e"},
		{"1nfs.example", "/e", "1nfs.example:/e"},
	}
	for _, g := range good {
		e, err := New(g.server, g.share)
		if err != nil || e.String() != g.source {
			t.Errorf("New(%q, %q) = %v, %v; want %s", g.server, g.share, e, err, g.source)
		}
	}
	bad := []struct{ server, share, err string }{
		{"", "/x", "required"},
		{"s", "", "required"},
		{"s", "x", "absolute"},
		{"s", "/a/../b", `".."`},
		{"s", "/a/./b", `"."`},
		{"s", "/a\x00", "control"},
		{"[10.0.0.1]", "/x", "IPv6"},
		{"fe80::1%eth0", "/x", "zones"},
		{"a:b", "/x", "neither"},
		{"a/b", "/x", "contains"},
		{"a#b", "/x", "contains"},
		{"a..b", "/x", "not a valid"},
		{"-o", "/x", "start or end with '-'"},
		{"nfs.-o", "/x", "start or end with '-'"},
		{"nfs-.example", "/x", "start or end with '-'"},
		{"nfs_server", "/x", "RFC 1123"},
		{strings.Repeat("a", 254), "/x", "253"},
	}
	for _, b := range bad {
		if _, err := New(b.server, b.share); err == nil || !strings.Contains(err.Error(), b.err) {
			t.Errorf("New(%q, %q) error = %v, want %q", b.server, b.share, err, b.err)
		}
	}
}

func TestSource(t *testing.T) {
	e, _ := New("fd00::1", "/srv")
	if got := e.Source("ns/pvc"); got != "[fd00::1]:/srv/ns/pvc" {
		t.Errorf("Source = %q", got)
	}
}

func TestAllowList(t *testing.T) {
	l, err := ParseAllowList("nfs.example:/srv/inline=rw, 10.0.0.1:/ro-data ,[fd00::1]:/=ro")
	if err != nil || len(l) != 3 {
		t.Fatalf("ParseAllowList = %v, %v", l, err)
	}
	e := func(server, share string) Export { x, _ := New(server, share); return x }
	cases := []struct {
		e      Export
		dir    string
		ok, rw bool
	}{
		{e("nfs.example", "/srv"), "inline/a", true, true},
		{e("nfs.example", "/srv/inline"), "", true, true},
		{e("nfs.example", "/srv"), "inline-other", false, false},
		{e("nfs.example", "/srv"), ".nfsdir", false, false},
		{e("10.0.0.1", "/ro-data"), "x", true, false},
		{e("10.0.0.2", "/ro-data"), "x", false, false},
		{e("fd00:0::1", "/any"), "thing", true, false},
	}
	for _, c := range cases {
		ok, rw := l.Allows(c.e, c.dir)
		if ok != c.ok || rw != c.rw {
			t.Errorf("Allows(%v, %q) = %v, %v; want %v, %v", c.e, c.dir, ok, rw, c.ok, c.rw)
		}
	}
	for _, bad := range []string{"nfs.example", "nfs.example:/x=rwx", "-o:/x", "a:/../b"} {
		if _, err := ParseAllowList(bad); err == nil {
			t.Errorf("ParseAllowList(%q) accepted", bad)
		}
	}
	if l, err := ParseAllowList(""); err != nil || len(l) != 0 {
		t.Errorf("empty list: %v %v", l, err)
	}
}
