package mountsec

import (
	"slices"
	"strings"
	"testing"

	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/mountopts"
)

func asked(t *testing.T, opts string) (Security, error) {
	t.Helper()
	o, err := mountopts.Parse(opts)
	if err != nil {
		t.Fatalf("%s: %v", opts, err)
	}
	return Asked(o)
}

func TestAskedReadsFlavoursAndTransport(t *testing.T) {
	for opts, want := range map[string]string{
		"nfsvers=4.2,hard":                   "default",
		"sec=krb5p":                          "sec=krb5p",
		"sec=krb5p:krb5i,xprtsec=mtls":       "sec=krb5p:krb5i,xprtsec=mtls",
		"xprtsec=tls,proto=tcp":              "xprtsec=tls",
		"xprtsec=none,proto=udp":             "xprtsec=none",
		"sec=sys,nfsvers=3,xprtsec=tls":      "sec=sys,xprtsec=tls",
		"proto=tcp6,xprtsec=mtls,sec=krb5i":  "sec=krb5i,xprtsec=mtls",
		"sec=none,lookupcache=none,noresvpt": "sec=none",
	} {
		s, err := asked(t, opts)
		if err != nil || s.String() != want {
			t.Errorf("%s: %v, %v; want %s", opts, s, err, want)
		}
	}
}

func TestAskedRefusesWhatNoClientMounts(t *testing.T) {
	for _, opts := range []string{
		"sec=krb6", "sec=lkey", "sec=krb5p:krb5p", "sec=", "sec=krb5::krb5i", "xprtsec=ssl", "xprtsec=",
		"xprtsec=tls,proto=udp", "xprtsec=mtls,udp", "xprtsec=tls,proto=rdma", "sec", "xprtsec",
	} {
		if s, err := asked(t, opts); err == nil || !fault.Is(err, fault.InvalidArgument) {
			t.Errorf("%s: %v, %v; want InvalidArgument", opts, s, err)
		}
	}
}

func TestNeedsTheDaemonsWithoutWhichNoMountSucceeds(t *testing.T) {
	for opts, want := range map[string][]Daemon{
		"nfsvers=4.2":                  nil,
		"xprtsec=none":                 nil,
		"xprtsec=tls":                  {Tlshd},
		"sec=krb5p,xprtsec=mtls":       {Tlshd, Gssd},
		"sec=krb5i:krb5":               {Gssd},
		"sec=krb5p:sys":                nil, // it falls back to sys without rpc.gssd
		"sec=sys":                      nil,
		"sec=krb5,xprtsec=tls,nolock":  {Tlshd, Gssd},
		"sec=none:krb5p,xprtsec=none,": nil,
	} {
		s, err := asked(t, opts)
		if err != nil || !slices.Equal(s.Needs(), want) {
			t.Errorf("%s: needs %v (%v), want %v", opts, s.Needs(), err, want)
		}
	}
}

func TestMountedReadsTheMountTable(t *testing.T) {
	line := "rw,relatime,vers=4.2,rsize=1048576,wsize=1048576,namlen=255,hard,proto=tcp,timeo=600,retrans=2,sec=krb5p,clientaddr=10.0.0.2,local_lock=none,xprtsec=mtls,addr=10.0.0.1"
	m := Mounted(strings.Split(line, ","))
	if m.Flavor != Krb5p || m.Transport != MTLS {
		t.Errorf("Mounted: %+v", m)
	}
	if m := Mounted([]string{"rw", "vers=3"}); m.Flavor != "" || m.Transport != Plain || m.String() != "sec=(none shown),xprtsec=none" {
		t.Errorf("Mounted of a table without them: %+v %s", m, m)
	}
}

func TestVerifyRefusesAFallback(t *testing.T) {
	for _, c := range []struct {
		opts    string
		mounted string
		ok      bool
	}{
		{"sec=krb5p", "sec=krb5p", true},
		{"sec=krb5p", "sec=sys", false},
		{"sec=krb5p:krb5i", "sec=krb5i", true},
		{"sec=krb5p:krb5i", "sec=krb5", false},
		{"xprtsec=tls", "sec=sys,xprtsec=tls", true},
		{"xprtsec=tls", "sec=sys", false},
		{"xprtsec=mtls", "sec=sys,xprtsec=tls", false},
		{"xprtsec=tls", "sec=sys,xprtsec=mtls", false},
		{"xprtsec=none", "sec=sys", true},
		{"nfsvers=4.2", "sec=krb5i,xprtsec=tls", true},
		{"nfsvers=4.2", "sec=sys", true},
		{"sec=krb5,xprtsec=mtls", "sec=krb5,xprtsec=mtls", true},
		{"sec=krb5,xprtsec=mtls", "sec=krb5", false},
	} {
		s, err := asked(t, c.opts)
		if err != nil {
			t.Fatal(err)
		}
		err = s.Verify(Mounted(strings.Split(c.mounted, ",")))
		if (err == nil) != c.ok || err != nil && !fault.Is(err, fault.FailedPrecondition) {
			t.Errorf("asked %s, mounted %s: %v", c.opts, c.mounted, err)
		}
		if err != nil && !strings.Contains(err.Error(), "ask for "+s.String()) {
			t.Errorf("the error does not say what was asked: %v", err)
		}
	}
}

// FuzzAskedAndVerify: whatever the options, Asked either refuses them or
// returns a security whose flavours and transport are ones the client
// knows, that needs at most its two daemons, that a mount with exactly
// what it asks for passes, and that only a TLS mount is told of a plain
// mount of its server.
func FuzzAskedAndVerify(f *testing.F) {
	for _, s := range []string{"sec=krb5p,xprtsec=mtls", "sec=krb5:sys", "xprtsec=tls,proto=udp", "proto=tcp6,xprtsec=tls", "sec=", "rw"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, opts string) {
		o, err := mountopts.Parse(opts)
		if err != nil {
			return
		}
		s, err := Asked(o)
		if err != nil {
			if !fault.Is(err, fault.InvalidArgument) {
				t.Fatalf("%q: %v is not InvalidArgument", opts, err)
			}
			return
		}
		for _, fl := range s.Flavors {
			if !slices.Contains(flavors, fl) {
				t.Fatalf("%q: flavour %q", opts, fl)
			}
		}
		if s.Transport != "" && s.Transport != Plain && !s.TLS() {
			t.Fatalf("%q: transport %q", opts, s.Transport)
		}
		if len(s.Needs()) > 2 {
			t.Fatalf("%q: needs %v", opts, s.Needs())
		}
		m := Mount{Transport: Plain}
		if len(s.Flavors) > 0 {
			m.Flavor = s.Flavors[len(s.Flavors)-1]
		}
		if s.Transport != "" {
			m.Transport = s.Transport
		}
		if err := s.Verify(m); err != nil {
			t.Fatalf("%q: a mount with what it asks for: %v", opts, err)
		}
		// A mount of the same server with exactly this transport security
		// is never one to refuse it for.
		same := Listed{Target: "/same", FsType: "nfs4", Options: []string{"addr=192.0.2.1", "xprtsec=" + string(m.Transport)}}
		plain := Listed{Target: "/plain", FsType: "nfs4", Options: []string{"addr=192.0.2.1"}}
		for _, l := range s.Sharing(o, []string{"192.0.2.1"}, []Listed{same, plain}) {
			if l.Target != "/plain" || !s.TLS() {
				t.Fatalf("%q: shares with %v", opts, l)
			}
		}
	})
}

// TestRefusedNamesWhatToCheck: a refused secure mount names the
// certificates or the keytab, whichever it asked for.
func TestRefusedNamesWhatToCheck(t *testing.T) {
	for opts, want := range map[string][]string{
		"xprtsec=mtls":          {"certificate", "xprtsec="},
		"sec=krb5i":             {"keytab", "rpc.gssd", "sec="},
		"sec=sys:krb5p":         {"keytab"},
		"sec=krb5,xprtsec=tls":  {"certificate", "keytab"},
		"sec=sys":               nil,
		"nfsvers=4.2,proto=tcp": nil,
	} {
		s, err := asked(t, opts)
		if err != nil {
			t.Fatal(err)
		}
		got := s.Refused()
		if (got == "") != (want == nil) {
			t.Errorf("%s: %q", opts, got)
		}
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: %q does not name %q", opts, got, w)
			}
		}
	}
}
