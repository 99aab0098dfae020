package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/nfsdir/nfsdir/pkg/serveragent"
	"github.com/nfsdir/nfsdir/pkg/treecopy"
	"github.com/nfsdir/nfsdir/pkg/usage"
)

// agentArgs are the arguments of `nfsdir agent`.
type agentArgs struct {
	listen, auditLog, projects string
	exports, copyExports       []string
	copyWorkers                int
	copyRate                   float64
	tls                        serveragent.Files
	ids                        serveragent.Identities
}

func parseAgent(args []string) (agentArgs, serveragent.Config, error) {
	var a agentArgs
	fs := agentFlags(&a)
	if err := fs.Parse(args); err != nil {
		return a, serveragent.Config{}, err
	}
	var cfg serveragent.Config
	for _, f := range []struct {
		flag string
		in   []string
		out  *[]serveragent.Export
	}{{"--export", a.exports, &cfg.Exports}, {"--copy-export", a.copyExports, &cfg.CopyExports}} {
		for _, e := range f.in {
			share, dir, ok := strings.Cut(e, "=")
			if !ok || share == "" || dir == "" {
				return a, cfg, fmt.Errorf("%s %q: want share=directory", f.flag, e)
			}
			*f.out = append(*f.out, serveragent.Export{Share: share, Dir: dir})
		}
	}
	if a.copyWorkers < 1 || a.copyRate < 0 {
		return a, cfg, fmt.Errorf("--copy-workers %d, --copy-rate %g: want at least 1 worker and a rate of 0 or more", a.copyWorkers, a.copyRate)
	}
	cfg.CopyWorkers, cfg.Copier = a.copyWorkers, treecopy.Default
	if a.copyRate > 0 {
		cfg.Copier.Limit = &usage.Rate{PerSecond: a.copyRate, Burst: max(1, int(a.copyRate/10))}
	}
	first, last, ok := strings.Cut(a.projects, "-")
	f, err1 := strconv.ParseUint(first, 10, 32)
	l, err2 := strconv.ParseUint(last, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return a, cfg, fmt.Errorf("--projects %q: want first-last", a.projects)
	}
	cfg.FirstProject, cfg.LastProject = uint32(f), uint32(l)
	return a, cfg, nil
}

// agentFlags defines the flags of nfsdir agent, filling a.
func agentFlags(a *agentArgs) *pflag.FlagSet {
	fs := pflag.NewFlagSet("nfsdir agent", pflag.ContinueOnError)
	fs.StringVar(&a.listen, "listen", ":29700", "host:port to serve the quota API on (TCP, mutual TLS)")
	fs.StringArrayVar(&a.exports, "export", nil, "an export root: share=directory, the share as NFS clients mount it and its local directory (repeatable; e.g. /srv/k8s=/srv/k8s, or /=/srv/nfs for an NFSv4 root)")
	fs.StringArrayVar(&a.copyExports, "copy-export", nil, "an export root served for server-side copies only (snapshots, restores, clones), on any file system: share=directory (repeatable)")
	fs.IntVar(&a.copyWorkers, "copy-workers", 2, "copies made at once; more wait their turn")
	fs.Float64Var(&a.copyRate, "copy-rate", 0, "entries per second all copies together make at most, so that they leave the server to its clients (0: no bound)")
	fs.StringVar(&a.tls.Cert, "tls-cert", "", "the agent's certificate (PEM; read again when it changes)")
	fs.StringVar(&a.tls.Key, "tls-key", "", "its private key (PEM)")
	fs.StringVar(&a.tls.CA, "client-ca", "", "the CA that signs the controller's client certificates (PEM)")
	fs.StringArrayVar(&a.ids.Controllers, "allow-controller", []string{serveragent.DefaultControllerIdentity}, "an identity (URI or DNS subject alternative name) of client certificates that may call every method: make and remove volumes, set and clear quotas, copy (repeatable)")
	fs.StringArrayVar(&a.ids.Readers, "allow-reader", nil, "an identity of client certificates that may only read quotas, follow copies and probe (repeatable)")
	fs.StringVar(&a.projects, "projects", "100000-199999", "the project IDs the agent gives volumes, first-last; others are never touched")
	fs.StringVar(&a.auditLog, "audit-log", "", "file to append one JSON line per change to (the log gets them too)")
	return fs
}

// runAgent serves the quota API on the NFS server host
// (docs/capacity-and-quotas.md, "Hard quotas").
func runAgent(args []string, _ io.Writer) error {
	a, cfg, err := parseAgent(args)
	if err != nil {
		return err
	}
	if a.auditLog != "" {
		f, err := os.OpenFile(a.auditLog, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return err
		}
		defer f.Close()
		cfg.Audit = f
	}
	agent, err := serveragent.New(cfg)
	if err != nil {
		return err
	}
	tlsCfg, err := serveragent.ServerTLS(a.tls, a.ids)
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", a.listen)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	klog.Infof("agent serving on %s for %d export roots (quotas and copies) and %d for copies only, projects %s", l.Addr(), len(cfg.Exports), len(cfg.CopyExports), a.projects)
	klog.Infof("agent callers: controllers %q, readers %q", a.ids.Controllers, a.ids.Readers)
	return serveragent.Serve(ctx, l, agent, tlsCfg, a.ids)
}
