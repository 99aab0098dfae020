package export

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Names maps the stable names of exports to where they are now. A volume
// made on a named export carries the name, never the address, in its ID,
// so moving the export (a new server, a new address, a load balancer in
// front) is a change of Names and a restart, and the volumes follow.
type Names map[string]Export

// MaxNameLen is the longest export name.
const MaxNameLen = 32

// CheckName accepts an export name: 1 to MaxNameLen lower-case letters,
// digits and '-', beginning and ending with a letter or digit.
func CheckName(name string) error {
	bad := name == "" || len(name) > MaxNameLen || name[0] == '-' || name[len(name)-1] == '-'
	for _, r := range name {
		bad = bad || !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-')
	}
	if bad {
		return fmt.Errorf("export name %q: use 1 to %d lower-case letters, digits and '-', beginning and ending with a letter or digit", name, MaxNameLen)
	}
	return nil
}

// ParseNamed parses "name=server:/share" (an IPv6 server in brackets).
func ParseNamed(s string) (string, Export, error) {
	name, src, ok := strings.Cut(s, "=")
	if !ok {
		return "", Export{}, fmt.Errorf("export %q must be name=server:/share", s)
	}
	if err := CheckName(name); err != nil {
		return "", Export{}, err
	}
	i := strings.Index(src, ":/")
	if i < 0 {
		return "", Export{}, fmt.Errorf("export %q must be name=server:/share", s)
	}
	e, err := New(src[:i], src[i+1:])
	if err != nil {
		return "", Export{}, fmt.Errorf("export %s: %v", name, err)
	}
	return name, e, nil
}

// ParseNames parses a list of "name=server:/share"; a name given twice is
// an error.
func ParseNames(list []string) (Names, error) {
	n := Names{}
	for _, s := range list {
		name, e, err := ParseNamed(s)
		if err != nil {
			return nil, err
		}
		if _, dup := n[name]; dup {
			return nil, fmt.Errorf("export %s is given twice", name)
		}
		n[name] = e
	}
	return n, nil
}

// Lookup returns the export name stands for now.
func (n Names) Lookup(name string) (Export, bool) {
	e, ok := n[name]
	return e, ok
}

// Elsewhere reports whether the export named name ("": none) is not at e
// now: a volume of it found through e is listed where the name is.
func (n Names) Elsewhere(name string, e Export) bool {
	if name == "" {
		return false
	}
	now, ok := n[name]
	return !ok || now != e
}

// List returns the names, sorted, for messages.
func (n Names) List() string {
	var names []string
	for name := range n {
		names = append(names, name)
	}
	sort.Strings(names)
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// MaxPool is the most exports one StorageClass may name.
const MaxPool = 16

// ParseList parses a comma-separated list of export names (spaces around
// names are ignored): 1 to MaxPool names, none given twice.
func ParseList(s string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(s, ",") {
		name := strings.TrimSpace(f)
		if err := CheckName(name); err != nil {
			return nil, err
		}
		if slices.Contains(out, name) {
			return nil, fmt.Errorf("export %s is named twice", name)
		}
		out = append(out, name)
	}
	if len(out) > MaxPool {
		return nil, fmt.Errorf("%d exports named; at most %d", len(out), MaxPool)
	}
	return out, nil
}
