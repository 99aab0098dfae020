package export

import (
	"strings"
	"testing"
)

func TestParseNames(t *testing.T) {
	m, err := ParseNames([]string{"main=nfs1.example.com:/srv/k8s", "v6=[fd00::1]:/srv/a:/b", "fast-2=10.0.0.2:/"})
	if err != nil {
		t.Fatal(err)
	}
	n := NewNames(m)
	for name, want := range map[string]Export{
		"main":   {Server: "nfs1.example.com", Share: "/srv/k8s"},
		"v6":     {Server: "fd00::1", Share: "/srv/a:/b"},
		"fast-2": {Server: "10.0.0.2", Share: "/"},
	} {
		if got, ok := n.Lookup(name); !ok || got != want {
			t.Errorf("%s = %+v, %v; want %+v", name, got, ok, want)
		}
	}
	if n.List() != "fast-2, main, v6" || (Names{}).List() != "none" {
		t.Errorf("List = %q", n.List())
	}
	for want, list := range map[string][]string{
		"must be name=server:/share":               {"main"},
		"must be name=server:/share ":              {"main=nfs1"},
		"export name \"Main\"":                     {"Main=a:/b"},
		"export name \"-a\"":                       {"-a=a:/b"},
		"export name \"\"":                         {"=a:/b"},
		"given twice":                              {"a=x:/y", "a=z:/y"},
		"export a: parameter \"share\"":            {"a=x:/y/../z"},
		"export name \"" + strings.Repeat("a", 33): {strings.Repeat("a", 33) + "=x:/y"},
	} {
		if _, err := ParseNames(list); err == nil || !strings.Contains(err.Error(), strings.TrimSpace(want)) {
			t.Errorf("%v: %v, want %q", list, err, want)
		}
	}
}

// FuzzParseNamed: whatever the text, an accepted entry has a valid name
// and an export New accepts as it is, and prints back to what parses to
// the same.
func FuzzParseNamed(f *testing.F) {
	f.Add("main=nfs1.example.com:/srv/k8s")
	f.Add("v6=[fd00::1]:/srv")
	f.Add("a=b:/c=d:/e")
	f.Add("x=-o:/y")
	f.Fuzz(func(t *testing.T, s string) {
		name, e, err := ParseNamed(s)
		if err != nil {
			return
		}
		if CheckName(name) != nil {
			t.Fatalf("%q: name %q accepted", s, name)
		}
		if again, err := New(e.Server, e.Share); err != nil || again != e {
			t.Fatalf("%q: export %+v is not normal: %+v, %v", s, e, again, err)
		}
		n2, e2, err := ParseNamed(name + "=" + e.String())
		if err != nil || n2 != name || e2 != e {
			t.Fatalf("%q: printed back as %q: %q %+v %v", s, name+"="+e.String(), n2, e2, err)
		}
	})
}

func TestElsewhere(t *testing.T) {
	n := NewNames(map[string]Export{"main": {Server: "b", Share: "/x"}})
	for _, c := range []struct {
		name string
		at   Export
		want bool
	}{
		{"", Export{Server: "a", Share: "/x"}, false},
		{"main", Export{Server: "b", Share: "/x"}, false},
		{"main", Export{Server: "a", Share: "/x"}, true},
		{"gone", Export{Server: "b", Share: "/x"}, true},
	} {
		if got := n.Elsewhere(c.name, c.at); got != c.want {
			t.Errorf("Elsewhere(%q, %v) = %v", c.name, c.at, got)
		}
	}
}

func TestParseList(t *testing.T) {
	got, err := ParseList(" fast-1, fast-2 ,archive")
	if err != nil || strings.Join(got, "|") != "fast-1|fast-2|archive" {
		t.Fatalf("%q, %v", got, err)
	}
	for _, bad := range []string{"", "a,", "a,,b", "a,a", "A", "a;b", strings.Repeat("x,", MaxPool) + "y"} {
		if got, err := ParseList(bad); err == nil {
			t.Errorf("ParseList(%q) = %q", bad, got)
		}
	}
}

func TestParseFile(t *testing.T) {
	m, err := ParseFile("# the cluster's exports\n\nmain=nfs1.example.com:/srv/k8s\n  fast-1 = 10.0.0.1:/a \n")
	if err == nil {
		t.Fatalf("spaces around '=' accepted: %v", m)
	}
	m, err = ParseFile("# the cluster's exports\n\nmain=nfs1.example.com:/srv/k8s\n  fast-1=10.0.0.1:/a \n")
	if err != nil || len(m) != 2 || m["fast-1"] != (Export{Server: "10.0.0.1", Share: "/a"}) {
		t.Fatalf("ParseFile = %v, %v", m, err)
	}
	for want, text := range map[string]string{
		"line 2":      "a=x:/y\nb",
		"given twice": "a=x:/y\na=x:/z",
		"at most":     strings.Repeat("#", MaxFile+1),
	} {
		if _, err := ParseFile(text); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%.20q: %v, want %q", text, err, want)
		}
	}
}

// TestNamesReplace: every copy of a Names sees a Replace at once, and
// readers never see a table half changed.
func TestNamesReplace(t *testing.T) {
	n := NewNames(map[string]Export{"a": {Server: "s1", Share: "/x"}})
	copyOf := n
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 1000; i++ {
			m := copyOf.Map()
			if a, b := m["a"], m["b"]; b != (Export{}) && a.Server != b.Server {
				t.Errorf("half a table: %v", m)
				return
			}
		}
	}()
	for i := 0; i < 1000; i++ {
		s := "s1"
		if i%2 == 1 {
			s = "s2"
		}
		n.Replace(map[string]Export{"a": {Server: s, Share: "/x"}, "b": {Server: s, Share: "/y"}})
	}
	<-done
	if e, ok := copyOf.Lookup("b"); !ok || e.Server != "s2" {
		t.Errorf("the copy sees %v, %v", e, ok)
	}
	if (Names{}).Elsewhere("a", Export{}) != true || (Names{}).List() != "none" {
		t.Error("the zero Names names something")
	}
}
