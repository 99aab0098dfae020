package lab

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Release is the Debian release the lab guest is made of (bookworm unless
// the lab was started with NFSDIR_LAB_RELEASE).
func Release() string { return env("NFSDIR_LAB_RELEASE", "bookworm") }

// Hostname is the lab server's host name, the one its TLS certificate
// and its Kerberos principal name (it resolves to 127.0.0.1 in the guest).
const Hostname = "nfslab"

// Daemon is a program a test runs in the background (tlshd, a KDC,
// gssproxy, rpc.gssd), stopped when the test ends.
type Daemon struct {
	Name string
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
}

// StartDaemon starts argv in the foreground of a process group of its own,
// with env added to the test's environment; its output is kept for Output
// and printed when the test fails.
func StartDaemon(t testing.TB, env []string, argv ...string) *Daemon {
	t.Helper()
	d := &Daemon{Name: filepath.Base(argv[0]), out: &syncBuffer{}, done: make(chan struct{})}
	d.cmd = exec.Command(argv[0], argv[1:]...)
	d.cmd.Env = append(os.Environ(), env...)
	d.cmd.Stdout, d.cmd.Stderr = d.out, d.out
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", d.Name, err)
	}
	go func() { d.cmd.Wait(); close(d.done) }()
	t.Cleanup(func() {
		d.Stop()
		if t.Failed() {
			t.Logf("%s said:\n%s", d.Name, d.Output())
		}
	})
	return d
}

// Running reports whether the daemon has not ended.
func (d *Daemon) Running() bool {
	select {
	case <-d.done:
		return false
	default:
		return true
	}
}

// Output is what the daemon printed so far.
func (d *Daemon) Output() string { return d.out.String() }

// Stop ends the daemon (SIGTERM, SIGKILL after 5 s) and reaps it.
func (d *Daemon) Stop() {
	if !d.Running() {
		return
	}
	syscall.Kill(-d.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(5 * time.Second):
		syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
		<-d.done
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.b.Len() > 1<<20 { // keep the first MiB
		return len(p), nil
	}
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// AddExport exports a fresh tmpfs at path with the given exports(5)
// options (besides rw, sync, no_subtree_check, no_root_squash, insecure and
// an fsid of its own) until the test ends.
func AddExport(t testing.TB, path, options string) {
	t.Helper()
	if err := os.MkdirAll(path, 0o755); err != nil {
		t.Fatal(err)
	}
	Sh(t, "mount -t tmpfs -o size=256m,mode=0755 export "+path)
	line := fmt.Sprintf("%s *(rw,sync,no_subtree_check,no_root_squash,insecure,fsid=%d,%s)\n", path, 100+exportSeq(), options)
	f, err := os.OpenFile("/etc/exports", os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(line)
	f.Close()
	Sh(t, "exportfs -ra")
	t.Cleanup(func() {
		b, _ := os.ReadFile("/etc/exports")
		os.WriteFile("/etc/exports", bytes.Replace(b, []byte(line), nil, 1), 0o644)
		exec.Command("exportfs", "-ra").Run()
		DetachBelow(path)
		syscall.Unmount(path, syscall.MNT_DETACH)
	})
}

var exportSeqN struct {
	sync.Mutex
	n int
}

func exportSeq() int {
	exportSeqN.Lock()
	defer exportSeqN.Unlock()
	exportSeqN.n++
	return exportSeqN.n
}

// TLSHD is the handshake daemon's configuration: the certificates it
// presents and trusts as a client (mounts) and as a server (knfsd).
type TLSHD struct {
	// ClientCA verifies servers; ClientCert is presented for xprtsec=mtls.
	ClientCA   string
	ClientCert CertFiles
	// ServerCA verifies clients of xprtsec=mtls exports; ServerCert is the
	// server's.
	ServerCA   string
	ServerCert CertFiles
}

// StartTLSHD writes a tlshd configuration for c in a directory of the
// test's and runs tlshd with it in the guest's network namespace, where
// the kernel's handshake upcall (client and server) reaches it.
func StartTLSHD(t testing.TB, c TLSHD) *Daemon {
	t.Helper()
	LoadCrypto(t)
	conf := filepath.Join(t.TempDir(), "tlshd.conf")
	var b strings.Builder
	fmt.Fprintf(&b, "[debug]\nloglevel=1\ntls=0\nnl=0\n\n[authenticate]\n\n")
	fmt.Fprintf(&b, "[authenticate.client]\nx509.truststore=%s\n", c.ClientCA)
	if c.ClientCert.Cert != "" {
		fmt.Fprintf(&b, "x509.certificate=%s\nx509.private_key=%s\n", c.ClientCert.Cert, c.ClientCert.Key)
	}
	fmt.Fprintf(&b, "\n[authenticate.server]\nx509.truststore=%s\nx509.certificate=%s\nx509.private_key=%s\n",
		c.ServerCA, c.ServerCert.Cert, c.ServerCert.Key)
	if err := os.WriteFile(conf, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	d := StartDaemon(t, nil, "tlshd", "-s", "-c", conf)
	d.WaitTLSHD(t)
	return d
}

// Realm is the lab's Kerberos realm.
const Realm = "LAB.NFSDIR.IO"

// KDC is a Kerberos realm served in the guest: the NFS server's service
// principal nfs/nfslab, in the server's keytab (ServerKeytab, for
// gssproxy, the acceptor), and the client machine's principal host/nfslab,
// in the system keytab (ClientKeytab, /etc/krb5.keytab, which rpc.gssd
// reads for the machine credential). krb5.conf maps the machine principal
// to root, as a server does for the clients it trusts with
// no_root_squash.
type KDC struct {
	ServerKeytab, ClientKeytab string
	Daemon                     *Daemon
	env                        []string
}

// ClientPrincipal is the lab client machine's Kerberos principal.
const ClientPrincipal = "host/" + Hostname

// StartKDC creates the realm's database, the principal and the keytabs,
// writes /etc/krb5.conf and starts krb5kdc.
func StartKDC(t testing.TB) *KDC {
	t.Helper()
	dir := t.TempDir()
	k := &KDC{ServerKeytab: filepath.Join(dir, "nfsd.keytab"), ClientKeytab: "/etc/krb5.keytab",
		env: []string{"KRB5_KDC_PROFILE=" + filepath.Join(dir, "kdc.conf")}}
	write := func(path, text string) {
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("/etc/krb5.conf", fmt.Sprintf(`[libdefaults]
	default_realm = %[1]s
	dns_lookup_kdc = false
	dns_lookup_realm = false
	dns_canonicalize_hostname = false
	rdns = false
[realms]
	%[1]s = {
		kdc = 127.0.0.1
		admin_server = 127.0.0.1
		auth_to_local = RULE:[2:$1/$2@$0](host/%[2]s@%[1]s)s/.*/root/
		auth_to_local = DEFAULT
	}
[domain_realm]
	%[2]s = %[1]s
`, Realm, Hostname))
	write(filepath.Join(dir, "kdc.conf"), fmt.Sprintf(`[logging]
	kdc = STDERR
[kdcdefaults]
	kdc_ports = 88
	kdc_tcp_ports = 88
[realms]
	%[1]s = {
		database_name = %[2]s/principal
		key_stash_file = %[2]s/stash
		acl_file = %[2]s/kadm5.acl
		supported_enctypes = aes256-cts-hmac-sha1-96:normal aes128-cts-hmac-sha1-96:normal
	}
`, Realm, dir))
	write(filepath.Join(dir, "kadm5.acl"), "")
	// rpc.gssd names the server by the canonical name of its address: the
	// lab's host name, not localhost, must be the first for 127.0.0.1.
	hosts, err := os.ReadFile("/etc/hosts")
	if err != nil {
		t.Fatal(err)
	}
	write("/etc/hosts", "127.0.0.1 "+Hostname+" localhost\n"+string(hosts))
	t.Cleanup(func() { os.WriteFile("/etc/hosts", hosts, 0o644) })
	os.Remove(k.ClientKeytab)
	k.run(t, "kdb5_util", "create", "-s", "-r", Realm, "-P", "lab-master-key")
	k.Admin(t, "addprinc -randkey nfs/"+Hostname)
	k.Admin(t, "ktadd -k "+k.ServerKeytab+" nfs/"+Hostname)
	k.Admin(t, "addprinc -randkey "+ClientPrincipal)
	k.Admin(t, "ktadd -k "+k.ClientKeytab+" "+ClientPrincipal)
	k.Daemon = StartDaemon(t, k.env, "krb5kdc", "-n", "-r", Realm)
	k.Daemon.waitReady(t, "listen on port 88", func() bool { return listensOn(88) })
	t.Cleanup(func() { os.Remove(k.ClientKeytab) })
	return k
}

// Admin runs a kadmin.local query on the realm's database.
func (k *KDC) Admin(t testing.TB, query string) string {
	t.Helper()
	return k.run(t, "kadmin.local", "-r", Realm, "-q", query)
}

func (k *KDC) run(t testing.TB, argv ...string) string {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), k.env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	return string(out)
}

// StartGSSProxy runs gssproxy as the kernel NFS server's acceptor of
// RPCSEC_GSS contexts, with the server's keytab; the kernel reaches it on
// /var/run/gssproxy.sock once it writes /proc/net/rpc/use-gss-proxy.
func StartGSSProxy(t testing.TB, k *KDC) *Daemon {
	t.Helper()
	dir := t.TempDir()
	conf := filepath.Join(dir, "gssproxy.conf")
	os.MkdirAll("/var/lib/gssproxy/clients", 0o700)
	os.MkdirAll("/var/lib/gssproxy/rcache", 0o700)
	os.MkdirAll("/var/tmp", 0o1777) // Kerberos's replay cache
	if err := os.WriteFile(conf, []byte(`[gssproxy]
	debug_level = 1
[service/nfs-server]
	mechs = krb5
	socket = /run/gssproxy.sock
	cred_store = keytab:`+k.ServerKeytab+`
	trusted = yes
	kernel_nfsd = yes
	euid = 0
`), 0o600); err != nil {
		t.Fatal(err)
	}
	d := StartDaemon(t, nil, "gssproxy", "-i", "-c", conf)
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := exec.Command("dmesg").CombinedOutput()
			t.Logf("kernel log:\n%s", out)
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile("/proc/net/rpc/use-gss-proxy")
		if strings.TrimSpace(string(b)) == "1" {
			return d
		}
		if !d.Running() || time.Now().After(deadline) {
			t.Fatalf("gssproxy did not take the kernel's GSS upcall (use-gss-proxy %q):\n%s", b, d.Output())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// StartGssd runs rpc.gssd, the client's Kerberos helper, on the guest's
// rpc_pipefs.
func StartGssd(t testing.TB) *Daemon {
	t.Helper()
	LoadCrypto(t)
	const pipefs = "/var/lib/nfs/rpc_pipefs"
	d := StartDaemon(t, nil, "rpc.gssd", "-f", "-vvv", "-rrr", "-p", pipefs)
	d.WaitGssd(t, pipefs)
	return d
}

// LoadCrypto loads kernel TLS, RPCSEC_GSS's Kerberos mechanism and the
// ciphers both use (those built into the kernel are not modules), as a
// node's kernel loads them on demand; the lab guest loads no module on
// demand.
func LoadCrypto(t testing.TB) {
	t.Helper()
	Sh(t, "for m in tls rpcsec_gss_krb5 gcm ghash_generic aes_generic ctr ccm chacha20poly1305 cts cbc hmac sha1_generic sha256_generic sha512_generic authenc cmac; do modprobe $m 2>/dev/null; done; modprobe tls")
}

// WaitNoNFSClients waits until the kernel has no NFS client of any server
// left (the last unmount's client is freed), so that the next mount makes
// a new one with a connection of its own.
func WaitNoNFSClients(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := os.ReadFile("/proc/fs/nfsfs/servers")
		if err != nil {
			t.Fatal(err)
		}
		if len(strings.Split(strings.TrimSpace(string(b)), "\n")) <= 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the kernel still has NFS clients 30 s after the last unmount:\n%s", b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ForgetServerClients ends the state the server keeps of NFSv4 clients
// once the kernel has none left, so that the next test begins with a
// server that knows no client. An unmount ends its client's state on the
// server (DESTROY_CLIENTID) with the credential the client was made with;
// after Kerberos mounts that does not always happen, and the server keeps
// the client as a "courtesy" client and refuses the next mounts of the
// same client name made with another credential. Records still there 5 s
// after the last kernel client went are expired (written to the test's
// log): a test that needs them gone says so itself.
func ForgetServerClients(t testing.TB) {
	t.Helper()
	WaitNoNFSClients(t)
	deadline := time.Now().Add(5 * time.Second)
	for {
		infos, _ := filepath.Glob("/proc/fs/nfsd/clients/*/info")
		if len(infos) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, info := range infos {
				b, _ := os.ReadFile(info)
				os.WriteFile(filepath.Join(filepath.Dir(info), "ctl"), []byte("expire\n"), 0)
				t.Logf("the server kept an NFSv4 client after the last unmount; expired:\n%s", b)
			}
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}
