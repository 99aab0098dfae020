package secdaemons

import (
	"path/filepath"
	"strings"
	"testing"
)

// files is a have function for the files of names, in any directory.
func files(names ...string) func(string) bool {
	return func(path string) bool {
		for _, m := range names {
			if filepath.Base(path) == m {
				return true
			}
		}
		return false
	}
}

func TestTLSHDConfig(t *testing.T) {
	conf, err := TLSHDConfig("/etc/nfsdir/tls", "", files(CAFile, CertFile, KeyFile), 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"loglevel=1\n", "[authenticate.client]\n", "x509.truststore=/etc/nfsdir/tls/ca.crt\n",
		"x509.certificate=/etc/nfsdir/tls/tls.crt\n", "x509.private_key=/etc/nfsdir/tls/tls.key\n"} {
		if !strings.Contains(conf, want) {
			t.Errorf("configuration lacks %q:\n%s", want, conf)
		}
	}
	if strings.Contains(conf, "[authenticate.server]") {
		t.Errorf("a mounting machine's tlshd serves no handshakes as a server:\n%s", conf)
	}
	conf, err = TLSHDConfig("/etc/nfsdir/tls", "", files(CAFile), 0)
	if err != nil || strings.Contains(conf, "x509.certificate") {
		t.Errorf("CA only (xprtsec=tls): %v\n%s", err, conf)
	}
	for _, tc := range []struct {
		name, dir string
		have      []string
		level     int
		want      string
	}{
		{"no CA", "/etc/nfsdir/tls", []string{CertFile, KeyFile}, 0, "ca.crt"},
		{"certificate without key", "/etc/nfsdir/tls", []string{CAFile, CertFile}, 0, "both"},
		{"key without certificate", "/etc/nfsdir/tls", []string{CAFile, KeyFile}, 0, "both"},
		{"relative directory", "tls", []string{CAFile}, 0, "absolute"},
		{"line break", "/etc/x\n[authenticate.server]", []string{CAFile}, 0, "line break"},
		{"level", "/etc/nfsdir/tls", []string{CAFile}, 10, "0 to 9"},
	} {
		if _, err := TLSHDConfig(tc.dir, "", files(tc.have...), tc.level); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %q", tc.name, err, tc.want)
		}
	}
}

func TestTLSHDConfigWithAServer(t *testing.T) {
	conf, err := TLSHDConfig("/etc/nfsdir/tls", "/etc/nfsdir/server-tls", files(CAFile, CertFile, KeyFile), 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"[authenticate.client]\nx509.truststore=/etc/nfsdir/tls/ca.crt\n",
		"[authenticate.server]\nx509.truststore=/etc/nfsdir/server-tls/ca.crt\nx509.certificate=/etc/nfsdir/server-tls/tls.crt\nx509.private_key=/etc/nfsdir/server-tls/tls.key\n"} {
		if !strings.Contains(conf, want) {
			t.Errorf("configuration lacks %q:\n%s", want, conf)
		}
	}
	noServerCert := func(p string) bool { return !strings.HasPrefix(p, "/etc/nfsdir/server-tls/tls.") }
	if _, err := TLSHDConfig("/etc/nfsdir/tls", "/etc/nfsdir/server-tls", noServerCert, 0); err == nil || !strings.Contains(err.Error(), "server's handshakes") {
		t.Errorf("a server without its certificate: %v", err)
	}
}

func FuzzTLSHDConfig(f *testing.F) {
	f.Add("/etc/nfsdir/tls", true, true, 1)
	f.Add("/a=b", false, true, 0)
	f.Fuzz(func(t *testing.T, dir string, cert, key bool, level int) {
		have := []string{CAFile}
		if cert {
			have = append(have, CertFile)
		}
		if key {
			have = append(have, KeyFile)
		}
		conf, err := TLSHDConfig(dir, "", files(have...), level)
		if err != nil {
			return
		}
		// Every line is a section, a key=value or blank: nothing in dir
		// adds a section or a key of its own.
		sections := 0
		for _, l := range strings.Split(conf, "\n") {
			switch {
			case l == "" || strings.HasPrefix(l, "["):
				if strings.HasPrefix(l, "[") {
					sections++
				}
			case strings.Count(l, "=") != 1:
				t.Fatalf("line %q of\n%s", l, conf)
			}
		}
		if sections != 3 { // [debug], [authenticate], [authenticate.client]
			t.Fatalf("%d sections in\n%s", sections, conf)
		}
	})
}

func TestGssdCommand(t *testing.T) {
	g, err := GssdCommand("/usr/sbin/rpc.gssd", "/run/rpc_pipefs", "/etc/nfsdir/krb5", files(KeytabFile, KRB5ConfFile), 2)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(g.Args, " "), "/usr/sbin/rpc.gssd -f -k /etc/nfsdir/krb5/krb5.keytab -p /run/rpc_pipefs -vv"; got != want {
		t.Errorf("args %q, want %q", got, want)
	}
	if len(g.Env) != 1 || g.Env[0] != "KRB5_CONFIG=/etc/nfsdir/krb5/krb5.conf" {
		t.Errorf("env %q", g.Env)
	}
	if _, err := GssdCommand("/usr/sbin/rpc.gssd", "/run/rpc_pipefs", "/etc/nfsdir/krb5", files(KRB5ConfFile), 0); err == nil || !strings.Contains(err.Error(), "krb5.keytab") {
		t.Errorf("no keytab: %v", err)
	}
	if _, err := GssdCommand("rpc.gssd", "/run/rpc_pipefs", "/etc/nfsdir/krb5", files(KeytabFile, KRB5ConfFile), 0); err == nil {
		t.Errorf("a relative program was taken")
	}
}

func TestRPCPipefsMounted(t *testing.T) {
	info := "24 30 0:22 / /run/rpc_pipefs rw,relatime shared:12 - rpc_pipefs sunrpc rw\n" +
		"25 30 0:23 / /var/lib/my\\040pipefs rw - rpc_pipefs sunrpc rw\n" +
		"26 30 0:24 / /proc rw - proc proc rw\n"
	for dir, want := range map[string]bool{"/run/rpc_pipefs": true, "/var/lib/my pipefs": true, "/proc": false, "/run": false} {
		if got := RPCPipefsMounted(info, dir); got != want {
			t.Errorf("%s: %v, want %v", dir, got, want)
		}
	}
}
