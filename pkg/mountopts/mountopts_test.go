package mountopts

import (
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	got, err := Parse("nfsvers=4.1, hard", "", "hard,timeo=600", "noatime")
	if err != nil {
		t.Fatal(err)
	}
	if want := (Options{"nfsvers=4.1", "hard", "timeo=600", "noatime"}); !reflect.DeepEqual(got, want) {
		t.Errorf("Parse = %v, want %v", got, want)
	}
	bad := map[string][]string{
		"set nfsvers twice": {"nfsvers=3", "vers=4.1"},
		"both":              {"ro,rw"},
		"space":             {"a b"},
		"must not start":    {"-o"},
		"quote":             {`a="b"`},
		"longer than 256":   {"x=" + strings.Repeat("y", 300)},
		"set timeo twice":   {"timeo=1,timeo=2"},
		"control character": {"a\nb"},
		`"bg" is refused`:   {"hard,bg"},
	}
	for want, lists := range bad {
		if _, err := Parse(lists...); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) error = %v, want %q", lists, err, want)
		}
	}
}

func TestReadOnlyAndShare(t *testing.T) {
	o, _ := Parse("rw,nfsvers=3")
	if got := o.WithReadOnly(true).String(); got != "nfsvers=3,ro" {
		t.Errorf("WithReadOnly = %q", got)
	}
	if got := o.WithReadOnly(false).String(); got != "rw,nfsvers=3" {
		t.Errorf("WithReadOnly(false) = %q", got)
	}
	r, _ := Parse("ro,hard")
	if got := r.ForShare().String(); got != "hard" {
		t.Errorf("ForShare = %q", got)
	}
	if !r.Has("ro") || r.Has("rw") || !o.WithReadOnly(true).Has("ro") {
		t.Error("Has")
	}
	a, _ := Parse("b,a")
	b, _ := Parse("a,b")
	if a.Canonical() != b.Canonical() || a.Canonical() != "a,b" {
		t.Error("Canonical")
	}
}

func FuzzParse(f *testing.F) {
	f.Add("nfsvers=4.1,hard")
	f.Add("-o,ro")
	f.Add("a b,'x'")
	f.Fuzz(func(t *testing.T, s string) {
		o, err := Parse(s)
		if err != nil {
			return
		}
		for _, opt := range o {
			if opt == "" || strings.ContainsAny(opt, ", \t\n\"'\\") || strings.HasPrefix(opt, "-") {
				t.Fatalf("accepted unsafe option %q", opt)
			}
		}
		again, err := Parse(o.String())
		if err != nil || !reflect.DeepEqual(again, o) {
			t.Fatalf("round trip of %q: %v, %v", o, again, err)
		}
	})
}
