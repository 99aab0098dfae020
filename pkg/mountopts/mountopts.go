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
	for _, opt := range o {
		if opp := opposite(opt); opp != "" {
			if _, both := vals[opp]; both {
				return fmt.Errorf("mount options contain both %q and %q", opt, opp)
			}
		}
	}
	return nil
}

// pairs are flag options whose opposite is not their "no" form.
var pairs = map[string]string{"ro": "rw", "rw": "ro", "hard": "soft", "soft": "hard", "sync": "async", "async": "sync"}

// opposite returns the flag option that undoes o ("suid" for "nosuid",
// "noexec" for "exec", "rw" for "ro"), or "" when o has a value.
func opposite(o string) string {
	if strings.Contains(o, "=") {
		return ""
	}
	if p, ok := pairs[o]; ok {
		return p
	}
	if rest, ok := strings.CutPrefix(o, "no"); ok && rest != "" {
		return rest
	}
	return "no" + o
}

// name returns the option's name without its value.
func name(o string) string {
	n, _, _ := strings.Cut(o, "=")
	if versionKeys[n] {
		return "nfsvers"
	}
	return n
}

// Policy is the node's rule for publish mount options: Defaults apply
// unless the volume's options say otherwise; Forced always apply and no
// option may undo them; when Allowed is not nil, every other option's name
// must be in it.
type Policy struct {
	Defaults Options
	Forced   Options
	Allowed  map[string]bool
}

// DefaultPolicy adds nosuid and nodev: an NFS server's set-user-ID files
// and device nodes get no power on the node unless a StorageClass asks for
// "suid" or "dev".
var DefaultPolicy = Policy{Defaults: Options{"nosuid", "nodev"}}

// Apply returns the options to mount with: the forced options, the
// defaults the volume's options do not override, then the volume's own.
// An option the policy does not allow, or one that undoes or changes a
// forced option, is an error naming it.
func (p Policy) Apply(o Options) (Options, error) {
	forced := map[string]string{}
	for _, f := range p.Forced {
		forced[name(f)] = f
		if opp := opposite(f); opp != "" {
			forced[opp] = f
		}
	}
	overridden := map[string]bool{}
	for _, opt := range o {
		if f, ok := forced[name(opt)]; ok && f != opt {
			return nil, fmt.Errorf("mount option %q is refused: the node's policy forces %q", opt, f)
		}
		if _, ok := forced[name(opt)]; !ok && p.Allowed != nil && !p.Allowed[name(opt)] {
			return nil, fmt.Errorf("mount option %q is not allowed by the node's policy", opt)
		}
		overridden[name(opt)] = true
		if opp := opposite(opt); opp != "" {
			overridden[opp] = true
		}
	}
	out := append(Options{}, p.Forced...)
	for _, d := range p.Defaults {
		if !overridden[name(d)] && !out.Has(d) {
			out = append(out, d)
		}
	}
	for _, opt := range o {
		if !out.Has(opt) {
			out = append(out, opt)
		}
	}
	return out, out.checkConflicts()
}

// ParsePolicy builds a policy from comma lists (flag values); allowed ""
// allows every option.
func ParsePolicy(defaults, forced, allowed string) (Policy, error) {
	var p Policy
	var err error
	if p.Defaults, err = Parse(defaults); err != nil {
		return p, fmt.Errorf("default mount options: %v", err)
	}
	if p.Forced, err = Parse(forced); err != nil {
		return p, fmt.Errorf("forced mount options: %v", err)
	}
	if allowed != "" {
		names, err := Parse(allowed)
		if err != nil {
			return p, fmt.Errorf("allowed mount options: %v", err)
		}
		p.Allowed = map[string]bool{}
		for _, n := range names {
			p.Allowed[name(n)] = true
		}
	}
	return p, nil
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

// reachKeys are the options that decide whether and how the server can be
// reached at all: protocol version, transport, ports, security flavour and
// NFSv3 locking. Everything else (sizes, timeouts, caching, nconnect) only
// tunes a mount that works without it.
var reachKeys = map[string]bool{
	"vers": true, "nfsvers": true, "minorversion": true, "proto": true, "port": true,
	"tcp": true, "udp": true, "rdma": true, "sec": true, "xprtsec": true,
	"mountport": true, "mountproto": true, "mountvers": true, "mounthost": true, "mountaddr": true,
	"lock": true, "nolock": true, "local_lock": true,
}

// ForReach returns the options of o that are needed to reach the share,
// in order: a controller that knows only these can still mount the share
// and manage the volumes on it.
func (o Options) ForReach() Options {
	out := Options{}
	for _, opt := range o {
		name, _, _ := strings.Cut(opt, "=")
		if reachKeys[name] {
			out = append(out, opt)
		}
	}
	return out
}

// WithFreshLookups returns o with lookupcache=none in place of any
// lookupcache option: every lookup by name then asks the server, so a name
// another client changed is never resolved to the directory it used to
// name. The controller's share mounts use it, since nfsdir acts on names
// that other controllers may change.
func (o Options) WithFreshLookups() Options {
	out := Options{}
	for _, opt := range o {
		if !strings.HasPrefix(opt, "lookupcache=") {
			out = append(out, opt)
		}
	}
	return append(out, "lookupcache=none")
}

// WithoutLockd returns o, when it mounts NFSv3 (vers=3, nfsvers=3), with
// nolock in place of any lock, nolock or local_lock option, and o itself
// otherwise. NFSv3 locks go through the server's and the client's lockd,
// and mount.nfs refuses a mount with them unless rpc.statd runs where it
// mounts; the controller mounts shares in its own pod's network, which
// has none, and never locks a file there: its mounts need no lockd.
func (o Options) WithoutLockd() Options {
	v3 := false
	for _, opt := range o {
		n, v, _ := strings.Cut(opt, "=")
		if versionKeys[n] {
			v3 = v == "3"
		}
	}
	if !v3 {
		return o
	}
	out := Options{}
	for _, opt := range o {
		if n := name(opt); n != "lock" && n != "nolock" && n != "local_lock" {
			out = append(out, opt)
		}
	}
	return append(out, "nolock")
}
