package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/nfsdir/nfsdir/pkg/secdaemons"
)

// daemonArgs are the arguments of `nfsdir daemon tlshd|rpc.gssd`, the
// entry point of the chart's daemon sidecars: it writes the daemon's
// configuration from a Secret's files and replaces itself with the daemon.
type daemonArgs struct {
	tlshd, gssd, pipefs, dir, serverDir, config string
	logLevel                                    int
}

func daemonFlags(a *daemonArgs) *pflag.FlagSet {
	fs := pflag.NewFlagSet("nfsdir daemon", pflag.ContinueOnError)
	fs.StringVar(&a.dir, "secret-dir", "", "the directory of the Secret's files: ca.crt, and tls.crt with tls.key for xprtsec=mtls (tlshd); krb5.keytab and krb5.conf (rpc.gssd)")
	fs.StringVar(&a.serverDir, "server-secret-dir", "", "tlshd on a machine that also serves NFS over TLS from its kernel: the directory of the server's ca.crt (verifies its clients), tls.crt and tls.key")
	fs.StringVar(&a.tlshd, "tlshd", "/usr/sbin/tlshd", "the tlshd program")
	fs.StringVar(&a.config, "tlshd-config", filepath.Join(os.TempDir(), "tlshd.conf"), "where tlshd's configuration is written")
	fs.StringVar(&a.gssd, "gssd", "/usr/sbin/rpc.gssd", "the rpc.gssd program")
	fs.StringVar(&a.pipefs, "rpc-pipefs", "/run/rpc_pipefs", "where rpc.gssd finds the kernel's rpc_pipefs (mounted there when it is not)")
	fs.IntVar(&a.logLevel, "log-level", 0, "the daemon's debug level: tlshd's loglevel (0 to 9), rpc.gssd's -v count (0 to 3)")
	return fs
}

// runDaemon runs `nfsdir daemon tlshd|rpc.gssd`: it does not return when
// the daemon starts.
func runDaemon(args []string, _ io.Writer) error {
	var a daemonArgs
	fs := daemonFlags(&a)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 || a.dir == "" {
		return fmt.Errorf("usage: nfsdir daemon tlshd|rpc.gssd --secret-dir DIR")
	}
	have := func(path string) bool {
		st, err := os.Stat(path)
		return err == nil && st.Mode().IsRegular()
	}
	switch fs.Arg(0) {
	case "tlshd":
		conf, err := secdaemons.TLSHDConfig(a.dir, a.serverDir, have, a.logLevel)
		if err != nil {
			return err
		}
		if err := os.WriteFile(a.config, []byte(conf), 0o600); err != nil {
			return err
		}
		return syscall.Exec(a.tlshd, []string{a.tlshd, "-s", "-c", a.config}, os.Environ())
	case "rpc.gssd":
		g, err := secdaemons.GssdCommand(a.gssd, a.pipefs, a.dir, have, a.logLevel)
		if err != nil {
			return err
		}
		if err := mountRPCPipefs(a.pipefs); err != nil {
			return err
		}
		return syscall.Exec(g.Args[0], g.Args, append(os.Environ(), g.Env...))
	default:
		return fmt.Errorf("unknown daemon %q: want tlshd or rpc.gssd", fs.Arg(0))
	}
}

// mountRPCPipefs mounts the kernel's rpc_pipefs at dir unless it is
// mounted there: the instance of the mounting process's network
// namespace, the one whose mounts rpc.gssd then serves.
func mountRPCPipefs(dir string) error {
	info, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	if secdaemons.RPCPipefsMounted(string(info), dir) {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := syscall.Mount("sunrpc", dir, "rpc_pipefs", 0, ""); err != nil {
		return fmt.Errorf("mount rpc_pipefs at %s: %v", dir, err)
	}
	return nil
}
