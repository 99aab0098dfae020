package export

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
)

// Names says where each export name is now. A volume made on a named
// export carries the name, never the address, in its ID, so moving the
// export (a new server, a new address, a load balancer in front) is a
// change of Names, and the volumes follow. Names is a handle: copies
// share one table, which Replace changes for all of them at once; it is
// safe for concurrent use. The zero Names names nothing.
type Names struct{ t *table }

type table struct {
	mu sync.RWMutex
	m  map[string]Export
}

// NewNames returns Names holding m (copied).
func NewNames(m map[string]Export) Names {
	n := Names{&table{}}
	n.Replace(m)
	return n
}

// Replace makes the names m (copied) hold from now on, for every copy of
// n.
func (n Names) Replace(m map[string]Export) {
	c := make(map[string]Export, len(m))
	for k, v := range m {
		c[k] = v
	}
	n.t.mu.Lock()
	n.t.m = c
	n.t.mu.Unlock()
}

// Map returns a copy of the names held now.
func (n Names) Map() map[string]Export {
	out := map[string]Export{}
	if n.t == nil {
		return out
	}
	n.t.mu.RLock()
	defer n.t.mu.RUnlock()
	for k, v := range n.t.m {
		out[k] = v
	}
	return out
}

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
func ParseNames(list []string) (map[string]Export, error) {
	n := map[string]Export{}
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

// MaxFile is the largest exports file ParseFile reads.
const MaxFile = 1 << 20

// ParseFile parses an exports file: one "name=server:/share" per line;
// blank lines and lines beginning with '#' are skipped. Errors name the
// line.
func ParseFile(text string) (map[string]Export, error) {
	if len(text) > MaxFile {
		return nil, fmt.Errorf("exports file of %d bytes: at most %d", len(text), MaxFile)
	}
	var list []string
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if _, err := ParseNames([]string{line}); err != nil {
			return nil, fmt.Errorf("line %d: %v", i+1, err)
		}
		list = append(list, line)
	}
	return ParseNames(list)
}

// Lookup returns the export name stands for now.
func (n Names) Lookup(name string) (Export, bool) {
	if n.t == nil {
		return Export{}, false
	}
	n.t.mu.RLock()
	defer n.t.mu.RUnlock()
	e, ok := n.t.m[name]
	return e, ok
}

// Elsewhere reports whether the export named name ("": none) is not at e
// now: a volume of it found through e is listed where the name is.
func (n Names) Elsewhere(name string, e Export) bool {
	if name == "" {
		return false
	}
	now, ok := n.Lookup(name)
	return !ok || now != e
}

// List returns the names, sorted, for messages.
func (n Names) List() string {
	var names []string
	for name := range n.Map() {
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
