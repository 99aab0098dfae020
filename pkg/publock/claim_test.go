package publock

import (
	"errors"
	"strings"
	"testing"
)

func TestNamesDoNotDependOnSpelling(t *testing.T) {
	if Name("a/b") != Name("/a//b/") || Name("a/b") == Name("a/c") {
		t.Fatalf("names: %s %s %s", Name("a/b"), Name("/a//b/"), Name("a/c"))
	}
	if n := Name("x"); !strings.HasPrefix(n, "v-") || len(n) != 22 || strings.ContainsAny(n, "/.") {
		t.Fatalf("name %q", n)
	}
	if ClockName("n1") == ClockName("n2") || !strings.HasPrefix(ClockName("n1"), "c-") {
		t.Fatal("clock names")
	}
}

func TestParse(t *testing.T) {
	c := Claim{Node: "lab-node", Volume: "v1"}
	got, err := Parse(c.Marshal())
	if err != nil || got != c {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	for _, free := range []string{"", "\n", "  "} {
		if got, err := Parse([]byte(free)); err != nil || !got.Free() {
			t.Errorf("Parse(%q) = %+v, %v; want free", free, got, err)
		}
	}
	for _, bad := range []string{`{"node":`, `{"volume":"v"}`, `[]`, "\xff", strings.Repeat(" ", 5000) + `{"node":"n"}`} {
		if _, err := Parse([]byte(bad)); !errors.Is(err, ErrUnreadable) {
			t.Errorf("Parse(%q) = %v, want ErrUnreadable", bad, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"node":"n","volume":"v"}`))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Parse(b)
		if err != nil {
			return
		}
		if c.Free() {
			return
		}
		again, err := Parse(c.Marshal())
		if err != nil || again != c {
			t.Fatalf("%+v does not round-trip: %+v %v", c, again, err)
		}
	})
}
