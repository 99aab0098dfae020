package mountopts

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// A Difference is a mount option a mount asked for and did not get: Got
// is what the mount table shows ("" for a flag it lacks).
type Difference struct{ Option, Asked, Got string }

func (d Difference) String() string {
	if d.Got == "" {
		return fmt.Sprintf("%s (got none)", d.Asked)
	}
	return fmt.Sprintf("%s (got %s)", d.Asked, d.Got)
}

// The kernel's defaults for options /proc/self/mountinfo leaves out when
// they hold them.
var shownDefaults = map[string]string{"acregmin": "3", "acregmax": "60", "acdirmin": "30", "acdirmax": "60",
	"nconnect": "1", "lookupcache": "all"}

// exclusive are the groups of flags of which a mount has exactly one, and
// the one it has when the table shows none.
var exclusive = []struct {
	flags []string
	def   string
}{
	{[]string{"hard", "soft", "softerr"}, "hard"},
	{[]string{"cto", "nocto"}, "cto"},
	{[]string{"ac", "noac"}, "ac"},
	{[]string{"sharecache", "nosharecache"}, "sharecache"},
	{[]string{"rdirplus", "nordirplus"}, "rdirplus"},
}

// Differences compares the options a mount asked for with those the mount
// table shows it got (its mount and super options), for the options the
// Linux NFS client lists: the protocol version, hard/soft, cto, ac and the
// attribute cache times, nconnect, lookupcache, proto, timeo,
// retrans, sharecache and rdirplus. rsize and wsize differ when the table
// shows more than asked (a server only lowers them). Options not asked
// for, and those it does not know, are not compared: what the server or
// the kernel chose for them is no difference. sec and xprtsec are
// mountsec's.
func Differences(asked Options, got []string) []Difference {
	table := map[string]string{}
	flags := map[string]bool{}
	for _, o := range got {
		k, v, ok := strings.Cut(o, "=")
		if ok {
			table[k] = v
		} else {
			flags[k] = true
		}
	}
	value := func(k string) string {
		if v, ok := table[k]; ok {
			return v
		}
		return shownDefaults[k]
	}
	var out []Difference
	seen := map[string]bool{}
	add := func(option, a, g string) {
		if !seen[option] {
			seen[option] = true
			out = append(out, Difference{Option: option, Asked: a, Got: g})
		}
	}
	for _, o := range asked {
		k, v, hasValue := strings.Cut(o, "=")
		switch {
		case versionKeys[k] && hasValue:
			if g, shown := table["vers"]; shown && g != v && !strings.HasPrefix(g, v+".") && !(v == "4.0" && g == "4") {
				add("vers", o, "vers="+g)
			}
		case k == "actimeo" && hasValue:
			for _, ac := range []string{"acregmin", "acregmax", "acdirmin", "acdirmax"} {
				if g := value(ac); g != v {
					add(ac, o, ac+"="+g)
				}
			}
		case (k == "rsize" || k == "wsize") && hasValue:
			a, err1 := strconv.ParseUint(v, 10, 64)
			g, err2 := strconv.ParseUint(table[k], 10, 64)
			if err1 == nil && err2 == nil && g > a {
				add(k, o, k+"="+table[k])
			}
		case hasValue && (k == "timeo" || k == "retrans" || k == "proto" || k == "nconnect" || k == "lookupcache" ||
			k == "acregmin" || k == "acregmax" || k == "acdirmin" || k == "acdirmax"):
			g := value(k)
			if k == "lookupcache" && (v == "positive" || v == "pos") {
				v = "pos"
			}
			if g != v && g != "" { // "": the table does not say
				add(k, o, k+"="+g)
			}
		case !hasValue:
			for _, group := range exclusive {
				if !slices.Contains(group.flags, k) {
					continue
				}
				have := group.def
				for _, f := range group.flags {
					if flags[f] {
						have = f
					}
				}
				if have != k {
					add(k, o, have)
				}
			}
		}
	}
	return out
}
