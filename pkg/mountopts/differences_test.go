package mountopts

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// A mount table's options of an NFSv4.2 mount with the kernel's defaults.
const defaultV42 = "rw,relatime,vers=4.2,rsize=1048576,wsize=1048576,namlen=255,hard,proto=tcp,timeo=600,retrans=2,sec=sys,clientaddr=127.0.0.1,local_lock=none,addr=127.0.0.1"

func TestDifferences(t *testing.T) {
	for _, tc := range []struct {
		asked, got string
		want       string // the differing options, by name
	}{
		{"nfsvers=4.2", defaultV42, ""},
		{"nfsvers=4", defaultV42, ""},
		{"vers=4.1", defaultV42, "vers"},
		{"nfsvers=3", defaultV42, "vers"},
		{"hard,timeo=600,retrans=2", defaultV42, ""},
		{"soft,timeo=100", defaultV42, "soft timeo"},
		{"soft", strings.Replace(defaultV42, "hard", "soft", 1), ""},
		{"softerr", strings.Replace(defaultV42, "hard", "soft", 1), "softerr"},
		{"noac", defaultV42, "noac"},
		{"noac", defaultV42 + ",noac", ""},
		{"actimeo=3", defaultV42, "acregmax acdirmin acdirmax"},
		{"acregmin=3,acdirmax=60", defaultV42, ""},
		{"nconnect=4", defaultV42, "nconnect"},
		{"nconnect=4", defaultV42 + ",nconnect=4", ""},
		{"nconnect=1", defaultV42, ""},
		{"lookupcache=positive", defaultV42 + ",lookupcache=pos", ""},
		{"lookupcache=none", defaultV42, "lookupcache"},
		{"nocto", defaultV42, "nocto"},
		{"nocto", defaultV42 + ",nocto", ""},
		{"nosharecache", defaultV42, "nosharecache"},
		// A server lowers rsize and wsize: only more than asked is a
		// difference.
		{"rsize=4194304", defaultV42, ""},
		{"rsize=65536,wsize=65536", defaultV42, "rsize wsize"},
		// Not compared: options the table does not list, or not asked.
		{"fsc,noatime,tcp,sec=krb5p,xprtsec=mtls,port=2049", defaultV42, ""},
		{"", defaultV42, ""},
	} {
		var got []string
		for _, d := range Differences(Options(splitNonEmpty(tc.asked)), strings.Split(tc.got, ",")) {
			got = append(got, d.Option)
			if !strings.Contains(tc.asked, strings.SplitN(d.Asked, "=", 2)[0]) {
				t.Errorf("%q: difference %+v names an option not asked", tc.asked, d)
			}
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("asked %q: differences %q, want %q", tc.asked, strings.Join(got, " "), tc.want)
		}
	}
}

func splitNonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// FuzzDifferences: whatever the options, a mount that got exactly what it
// asked for (on top of the kernel's defaults) has no difference, and every
// difference names an option that was asked for.
func FuzzDifferences(f *testing.F) {
	f.Add("soft,timeo=100,nconnect=4", defaultV42)
	f.Add("actimeo=7,noac", "vers=3,ac")
	f.Fuzz(func(t *testing.T, asked, got string) {
		a := Options(splitNonEmpty(asked))
		for _, d := range Differences(a, strings.Split(got, ",")) {
			found := false
			for _, o := range a {
				if o == d.Asked {
					found = true
				}
			}
			if !found {
				t.Fatalf("difference %+v of no asked option (%q)", d, asked)
			}
		}
		// The table as a mount that got a's exact values would show it.
		var table []string
		for _, o := range a {
			k, v, ok := strings.Cut(o, "=")
			switch {
			case versionKeys[k] && ok:
				table = append(table, "vers="+v)
			case k == "actimeo" && ok:
				table = append(table, "acregmin="+v, "acregmax="+v, "acdirmin="+v, "acdirmax="+v)
			case k == "lookupcache" && ok && v == "positive":
				table = append(table, "lookupcache=pos")
			default:
				table = append(table, o)
			}
		}
		if ds := Differences(a, table); len(ds) > 0 && consistent(a) {
			t.Fatalf("asked %q, the table shows %q: differences %v", asked, table, ds)
		}
	})
}

// consistent reports whether a asks for each option once: two values of
// one option (or one of a group of exclusive flags) cannot both be got.
func consistent(a Options) bool {
	seen := map[string]bool{}
	for _, o := range a {
		k, _, _ := strings.Cut(o, "=")
		keys := []string{k}
		switch {
		case versionKeys[k]:
			keys = []string{"vers"}
		case k == "actimeo":
			keys = []string{"acregmin", "acregmax", "acdirmin", "acdirmax"}
		default:
			for i, g := range exclusive {
				if slices.Contains(g.flags, k) {
					keys = []string{fmt.Sprint("flags", i)}
				}
			}
		}
		for _, key := range keys {
			if seen[key] {
				return false
			}
			seen[key] = true
		}
	}
	return true
}
