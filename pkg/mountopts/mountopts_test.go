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
		"set nfsvers twice":        {"nfsvers=3", "vers=4.1"},
		"both":                     {"ro,rw"},
		"space":                    {"a b"},
		"must not start":           {"-o"},
		"quote":                    {`a="b"`},
		"longer than 256":          {"x=" + strings.Repeat("y", 300)},
		"set timeo twice":          {"timeo=1,timeo=2"},
		"control character":        {"a\nb"},
		`"bg" is refused`:          {"hard,bg"},
		`both "nosuid" and "suid"`: {"nosuid,nodev", "suid"},
		`both "soft" and "hard"`:   {"soft", "hard"},
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

func TestPolicy(t *testing.T) {
	p := DefaultPolicy
	cases := []struct{ in, want string }{
		{"nfsvers=4.1", "nosuid,nodev,nfsvers=4.1"},
		{"suid,hard", "nodev,suid,hard"},
		{"dev,suid", "dev,suid"},
		{"nodev", "nosuid,nodev"},
	}
	for _, c := range cases {
		o, _ := Parse(c.in)
		got, err := p.Apply(o)
		if err != nil || got.String() != c.want {
			t.Errorf("Apply(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	strict, err := ParsePolicy("nosuid", "nodev,sec=sys,noexec", "nfsvers,vers,hard,timeo,ro")
	if err != nil {
		t.Fatal(err)
	}
	o, _ := Parse("vers=4.1,hard,ro")
	if got, err := strict.Apply(o); err != nil || got.String() != "nodev,sec=sys,noexec,nosuid,vers=4.1,hard,ro" {
		t.Errorf("strict Apply = %q, %v", got, err)
	}
	for in, want := range map[string]string{
		"dev":          `forces "nodev"`,
		"sec=krb5":     `forces "sec=sys"`,
		"exec":         `forces "noexec"`,
		"nosharecache": "not allowed",
		"context=x":    "not allowed",
	} {
		o, _ := Parse(in)
		if _, err := strict.Apply(o); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("strict Apply(%q) = %v, want %q", in, err, want)
		}
	}
	if _, err := ParsePolicy("", "bg", ""); err == nil {
		t.Error("a forced bg was accepted")
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
		strict := Policy{Forced: Options{"nodev", "nosuid", "sec=sys"}, Defaults: Options{"noexec"}}
		if got, err := strict.Apply(o); err == nil {
			for _, f := range strict.Forced {
				if !got.Has(f) || (opposite(f) != "" && got.Has(opposite(f))) {
					t.Fatalf("Apply(%q) = %q undoes the forced %q", o, got, f)
				}
			}
		}
		again, err := Parse(o.String())
		if err != nil || !reflect.DeepEqual(again, o) {
			t.Fatalf("round trip of %q: %v, %v", o, again, err)
		}
	})
}

func TestWithoutLockd(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"nfsvers=3,hard", "nfsvers=3,hard,nolock"},
		{"vers=3,lock,local_lock=flock", "vers=3,nolock"},
		{"nfsvers=3,nolock", "nfsvers=3,nolock"},
		{"nfsvers=4.2,hard", "nfsvers=4.2,hard"},
		{"hard", "hard"},
	} {
		in, err := Parse(tc.in)
		if err != nil {
			t.Fatal(err)
		}
		if got := in.WithoutLockd().String(); got != tc.want {
			t.Errorf("%q.WithoutLockd() = %q, want %q", tc.in, got, tc.want)
		}
	}
}
