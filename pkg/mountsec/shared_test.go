package mountsec

import (
	"strings"
	"testing"

	"github.com/nfsdir/nfsdir/pkg/mountopts"
)

func listed(target, fstype, opts string) Listed {
	return Listed{Target: target, FsType: fstype, Options: strings.Split(opts, ",")}
}

// TestSharingFindsTheServersNFSv4ConnectionWithOtherSecurity: a TLS mount
// of a server is told of the node's NFSv4 mounts of that server (by
// address) without TLS or with another TLS; NFSv3 mounts, other servers'
// mounts and mounts with the same transport security do not count, and a
// mount that asks for no transport security or for NFSv3 shares nothing
// that matters.
func TestSharingFindsTheServersNFSv4ConnectionWithOtherSecurity(t *testing.T) {
	table := []Listed{
		listed("/plain", "nfs4", "rw,vers=4.2,sec=sys,addr=192.0.2.1"),
		listed("/v3", "nfs", "rw,vers=3,sec=sys,addr=192.0.2.1"),
		listed("/other-server", "nfs4", "rw,vers=4.2,sec=sys,addr=192.0.2.2"),
		listed("/mtls", "nfs4", "rw,vers=4.2,sec=sys,xprtsec=mtls,addr=192.0.2.3"),
		listed("/tls", "nfs4", "rw,vers=4.1,sec=sys,xprtsec=tls,addr=192.0.2.3"),
	}
	for _, tc := range []struct {
		opts  string
		addrs []string
		want  []string
	}{
		{"nfsvers=4.2,xprtsec=mtls", []string{"192.0.2.1"}, []string{"/plain"}},
		{"xprtsec=tls", []string{"192.0.2.9", "192.0.2.1"}, []string{"/plain"}},
		{"nfsvers=4.2,xprtsec=mtls", []string{"192.0.2.2"}, []string{"/other-server"}},
		{"nfsvers=4.2,xprtsec=mtls", []string{"192.0.2.3"}, []string{"/tls"}},
		{"nfsvers=4.2,xprtsec=tls", []string{"192.0.2.3"}, []string{"/mtls"}},
		{"nfsvers=4.2,xprtsec=none", []string{"192.0.2.3"}, []string{"/mtls", "/tls"}},
		{"nfsvers=4.2,xprtsec=mtls", []string{"192.0.2.4"}, nil},
		{"nfsvers=3,xprtsec=mtls", []string{"192.0.2.1"}, nil},
		{"vers=3,xprtsec=tls", []string{"192.0.2.1"}, nil},
		{"nfsvers=4.2,sec=krb5p", []string{"192.0.2.1"}, nil},
	} {
		o, err := mountopts.Parse(tc.opts)
		if err != nil {
			t.Fatal(err)
		}
		s, err := Asked(o)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, m := range s.Sharing(o, tc.addrs, table) {
			got = append(got, m.Target)
		}
		if strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("%s to %v: shares with %v, want %v", tc.opts, tc.addrs, got, tc.want)
		}
	}
}
