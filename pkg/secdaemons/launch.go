package secdaemons

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/nfsdir/nfsdir/pkg/mounttable"
)

// The files a TLS Secret holds, by the names Kubernetes TLS Secrets (and
// cert-manager's) use.
const (
	CAFile   = "ca.crt"
	CertFile = "tls.crt"
	KeyFile  = "tls.key"
)

// TLSHDConfig is tlshd's configuration for a node or controller that
// mounts with xprtsec=tls or mtls, from the certificate files in dir: the
// CA that verifies servers (ca.crt, required) and, for xprtsec=mtls, the
// client certificate and its key (tls.crt and tls.key, both or neither).
// A machine that also serves NFS over TLS from its kernel (one tlshd
// answers every handshake of its network namespace) names serverDir, with
// the server's certificate and key and the CA that verifies its clients;
// "" leaves the server's handshakes unanswered. have tells whether a file
// exists. The configuration names the files by their paths, and tlshd
// reads them at each handshake, so a Secret updated in place (a new ..data
// link) is used from the next mount on, without a restart. logLevel is
// tlshd's debug level (0 is quiet).
func TLSHDConfig(dir, serverDir string, have func(path string) bool, logLevel int) (string, error) {
	if logLevel < 0 || logLevel > 9 {
		return "", fmt.Errorf("log level %d: want 0 to 9", logLevel)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "[debug]\nloglevel=%d\ntls=0\nnl=0\n\n[authenticate]\n", logLevel)
	for _, side := range []struct {
		name, dir    string
		certRequired bool
	}{{"client", dir, false}, {"server", serverDir, true}} {
		if side.dir == "" && side.name == "server" {
			continue
		}
		if !filepath.IsAbs(side.dir) {
			return "", fmt.Errorf("%s certificates directory %q: want an absolute path", side.name, side.dir)
		}
		if strings.ContainsAny(side.dir, "\n\r=#;") {
			return "", fmt.Errorf("%s certificates directory %q: a path with a line break, '=', '#' or ';' cannot go in tlshd's configuration", side.name, side.dir)
		}
		ca, cert, key := filepath.Join(side.dir, CAFile), filepath.Join(side.dir, CertFile), filepath.Join(side.dir, KeyFile)
		if !have(ca) {
			return "", fmt.Errorf("%s holds no %s: tlshd needs the CA that verifies the %s's peers", side.dir, CAFile, side.name)
		}
		if have(cert) != have(key) {
			return "", fmt.Errorf("%s holds only one of %s and %s: a certificate needs both", side.dir, CertFile, KeyFile)
		}
		if side.certRequired && !have(cert) {
			return "", fmt.Errorf("%s holds no %s and %s: an NFS server's handshakes need its certificate", side.dir, CertFile, KeyFile)
		}
		fmt.Fprintf(&b, "\n[authenticate.%s]\nx509.truststore=%s\n", side.name, ca)
		if have(cert) {
			fmt.Fprintf(&b, "x509.certificate=%s\nx509.private_key=%s\n", cert, key)
		}
	}
	return b.String(), nil
}

// The files a Kerberos Secret holds.
const (
	KeytabFile   = "krb5.keytab"
	KRB5ConfFile = "krb5.conf"
)

// Gssd is how rpc.gssd runs for a node or controller: its arguments and
// environment.
type Gssd struct {
	Args []string
	Env  []string
}

// GssdCommand is rpc.gssd in the foreground on the rpc_pipefs at pipefs,
// with the machine credential from dir's keytab (krb5.keytab) and the
// realm's configuration from dir's krb5.conf. Both are read where they
// are, so an updated Secret is used from the next credential on. verbose
// repeats -v (0 is quiet).
func GssdCommand(program, pipefs, dir string, have func(path string) bool, verbose int) (Gssd, error) {
	for _, p := range []string{program, pipefs, dir} {
		if !filepath.IsAbs(p) {
			return Gssd{}, fmt.Errorf("%q: want an absolute path", p)
		}
	}
	if verbose < 0 || verbose > 3 {
		return Gssd{}, errors.New("verbosity: want 0 to 3")
	}
	for _, f := range []string{KeytabFile, KRB5ConfFile} {
		if !have(filepath.Join(dir, f)) {
			return Gssd{}, fmt.Errorf("%s holds no %s: rpc.gssd needs the node's keytab (%s) and the realm's configuration (%s)", dir, f, KeytabFile, KRB5ConfFile)
		}
	}
	args := []string{program, "-f", "-k", filepath.Join(dir, KeytabFile), "-p", pipefs}
	if verbose > 0 {
		args = append(args, "-"+strings.Repeat("v", verbose))
	}
	return Gssd{Args: args, Env: []string{"KRB5_CONFIG=" + filepath.Join(dir, KRB5ConfFile)}}, nil
}

// RPCPipefsMounted reports whether mountinfo (a /proc/PID/mountinfo's
// text) shows an rpc_pipefs mounted at dir.
func RPCPipefsMounted(mountinfo, dir string) bool {
	for _, line := range strings.Split(mountinfo, "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if ok && len(f) >= 5 && len(g) >= 1 && g[0] == "rpc_pipefs" && mounttable.Unescape(f[4]) == dir {
			return true
		}
	}
	return false
}
