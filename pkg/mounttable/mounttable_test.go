package mounttable

import (
	"strings"
	"testing"
)

func TestUnescape(t *testing.T) {
	cases := map[string]string{
		`/var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/team\040a/mount`: "/var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/team a/mount",
		`10.0.0.1:/export/a\011b\012c\134d`:                                 "10.0.0.1:/export/a\tb\nc\\d",
		`/plain`:                                                            "/plain",
		`/trail\`:                                                           `/trail\`,
		`/short\04`:                                                         `/short\04`,
		`/not\08x`:                                                          `/not\08x`,
		`/big\777`:                                                          `/big\777`,
		`\134\134040`:                                                       `\\040`,
	}
	for in, want := range cases {
		if got := Unescape(in); got != want {
			t.Errorf("Unescape(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSourcePath(t *testing.T) {
	cases := map[string]string{
		"127.0.0.1:/export/a b": "/export/a b",
		"[::1]:/export":         "/export",
		"[fd00::1]:/x:/y":       "/x:/y",
		"nfs.example:/":         "/",
		"tmpfs":                 "",
		"[::1]/x":               "",
	}
	for in, want := range cases {
		if got := SourcePath(in); got != want {
			t.Errorf("SourcePath(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSameSource(t *testing.T) {
	if !SameSource("127.0.0.1:/export/v", "[::1]:/export/v") || SameSource("h:/export/v", "h:/export/w") || SameSource("tmpfs", "tmpfs") {
		t.Error("SameSource")
	}
}

// escape is the kernel's mangling of mountinfo fields (seq_escape with
// " \t\n\\").
func escape(s string) string {
	r := strings.NewReplacer("\\", `\134`, " ", `\040`, "\t", `\011`, "\n", `\012`)
	return r.Replace(s)
}

func FuzzUnescape(f *testing.F) {
	f.Add("/a b\\c\td\ne")
	f.Add(`\134040`)
	f.Fuzz(func(t *testing.T, s string) {
		if got := Unescape(escape(s)); got != s {
			t.Fatalf("Unescape(escape(%q)) = %q", s, got)
		}
		if !strings.Contains(s, `\`) && Unescape(s) != s {
			t.Fatalf("Unescape changed %q without a backslash", s)
		}
	})
}

func TestSourceHost(t *testing.T) {
	for source, want := range map[string]string{
		"nfs.example:/export/a": "nfs.example",
		"127.0.0.1:/":           "127.0.0.1",
		"[fd00::1]:/export":     "fd00::1",
		"[fd00::1]/export":      "",
		"/export":               "",
		"":                      "",
	} {
		if got := SourceHost(source); got != want {
			t.Errorf("SourceHost(%q) = %q, want %q", source, got, want)
		}
	}
}
