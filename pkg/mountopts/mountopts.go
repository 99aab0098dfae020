// Package mountopts merges and checks NFS mount options from the places a
// volume can get them: the StorageClass mountOptions (CSI MountFlags), the
// volume attribute "mountOptions" (a comma list) and the read-only flag.
package mountopts

import (
	"fmt"
	"sort"
	"strings"
)

// versionKeys are the option names that select the NFS protocol version.
var versionKeys = map[string]bool{"nfsvers": true, "vers": true}

// Options is an ordered list of mount options, each "name" or "name=value".
type Options []string

// Parse splits comma-separated option lists (each element of lists may hold
// several options), trims spaces, drops empty items and exact duplicates,
// and rejects options that could not be passed safely to mount(8).
func Parse(lists ...string) (Options, error) {
	var out Options
	seen := map[string]bool{}
	for _, l := range lists {
		for _, o := range strings.Split(l, ",") {
			o = strings.TrimSpace(o)
			if o == "" || seen[o] {
				continue
			}
			if err := checkOption(o); err != nil {
				return nil, err
			}
			seen[o] = true
			out = append(out, o)
		}
	}
	return out, out.checkConflicts()
}

// detaching are options with which mount(8) can return success before
// anything is mounted: "bg" makes mount.nfs retry in a daemon of its own
// when the first attempt fails, which no deadline reaches and which mounts
// over the target later, hiding what a pod wrote meanwhile.
var detaching = map[string]bool{"bg": true}

// Detaching reports whether the option o lets mount(8) return before the
// mount is in place.
func Detaching(o string) bool { return detaching[o] }

func checkOption(o string) error {
	if Detaching(o) {
		return fmt.Errorf("mount option %q is refused: it lets mount(8) succeed before anything is mounted (use the default \"fg\")", o)
	}
	if strings.HasPrefix(o, "-") {
		return fmt.Errorf("mount option %q must not start with '-'", o)
	}
	for _, r := range o {
		if r <= ' ' || r == 0x7f || r == '"' || r == '\'' || r == '\\' {
			return fmt.Errorf("mount option %q contains a space, quote or control character", o)
		}
	}
	if len(o) > 256 {
		return fmt.Errorf("mount option %.20q... is longer than 256 bytes", o)
	}
	return nil
}

func (o Options) checkConflicts() error {
	vals := map[string]string{}
	for _, opt := range o {
		name, val, _ := strings.Cut(opt, "=")
		if versionKeys[name] {
			name = "nfsvers"
		}
		if prev, ok := vals[name]; ok && prev != val && val != "" {
			return fmt.Errorf("mount options set %s twice, to %q and %q", name, prev, val)
		}
		vals[name] = val
	}
	if _, ro := vals["ro"]; ro {
		if _, rw := vals["rw"]; rw {
			return fmt.Errorf(`mount options contain both "ro" and "rw"`)
		}
	}
	return nil
}

// WithReadOnly returns the options with "ro" added and "rw" removed when
// readOnly is true, and unchanged otherwise.
func (o Options) WithReadOnly(readOnly bool) Options {
	if !readOnly {
		return o
	}
	out := Options{}
	for _, opt := range o {
		if opt != "rw" && opt != "ro" {
			out = append(out, opt)
		}
	}
	return append(out, "ro")
}

// ForShare returns the options the controller uses to mount the whole
// share: the class options without "ro" (the controller creates
// directories) and without options that make no sense for it.
func (o Options) ForShare() Options {
	out := Options{}
	for _, opt := range o {
		if opt == "ro" || opt == "rw" {
			continue
		}
		out = append(out, opt)
	}
	return out
}

// Has reports whether the option name (without a value) is in the list.
func (o Options) Has(name string) bool {
	for _, opt := range o {
		if opt == name {
			return true
		}
	}
	return false
}

// String returns the options as a comma list, in order.
func (o Options) String() string { return strings.Join(o, ",") }

// Canonical returns a sorted comma list, equal for option sets that differ
// only in order; it keys mounts that may be shared.
func (o Options) Canonical() string {
	c := append(Options(nil), o...)
	sort.Strings(c)
	return strings.Join(c, ",")
}
