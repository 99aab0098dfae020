package mountsec

import (
	"slices"
	"strings"

	"github.com/nfsdir/nfsdir/pkg/mountopts"
)

// Listed is an NFS mount as the mount table lists it.
type Listed struct {
	Target  string
	FsType  string   // nfs or nfs4
	Options []string // mount and superblock options (addr=, xprtsec=, ...)
}

// Sharing returns the mounts of table whose connection a new NFSv4 mount
// with options o, asking for s, of a server at one of addrs would travel
// on while their transport security is not the one s asks for. Linux keeps
// one NFSv4 client per server in a network namespace, and every later
// NFSv4 mount of that server uses its connection whatever xprtsec it asks:
// beside a plain mount, a TLS mount would go in clear (or be refused by an
// export that allows only TLS). NFSv3 mounts, and mounts that ask for no
// transport security, share nothing that matters here.
func (s Security) Sharing(o mountopts.Options, addrs []string, table []Listed) []Listed {
	if s.Transport == "" || version3(o) {
		return nil
	}
	var out []Listed
	for _, m := range table {
		if m.FsType != "nfs4" || !slices.Contains(addrs, optionValue(m.Options, "addr")) {
			continue
		}
		if Mounted(m.Options).Transport != s.Transport {
			out = append(out, m)
		}
	}
	return out
}

// version3 reports whether o asks for NFSv3 (or v2).
func version3(o mountopts.Options) bool {
	for _, name := range []string{"nfsvers", "vers"} {
		if v := optionValue(o, name); v == "3" || v == "2" {
			return true
		}
	}
	return o.Has("v3") || o.Has("v2")
}

func optionValue(opts []string, name string) string {
	val := ""
	for _, opt := range opts {
		if n, v, ok := strings.Cut(opt, "="); ok && n == name {
			val = v // the last one wins, as for mount(8)
		}
	}
	return val
}
