package nfsmount

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/mountsec"
)

// daemons is a Checker that records what it was asked and answers err.
type daemons struct {
	asked [][]mountsec.Daemon
	err   error
}

func (d *daemons) Check(_ context.Context, needs []mountsec.Daemon) error {
	d.asked = append(d.asked, needs)
	return d.err
}

// TestMountWithoutItsDaemonIsRefusedAtOnce: a mount that asks for TLS or
// Kerberos where its daemon is missing never runs mount(8), which would
// wait out its timeouts; the answer is the checker's FailedPrecondition.
func TestMountWithoutItsDaemonIsRefusedAtOnce(t *testing.T) {
	argsFile := scriptMount(t, "exit 0")
	s := NewSystem()
	d := &daemons{err: fault.New(fault.FailedPrecondition, "no tlshd listens")}
	s.Daemons = d
	err := s.Mount(context.Background(), "nfs.example.com:/share", t.TempDir(), []string{"sec=krb5p", "xprtsec=mtls"})
	if !fault.Is(err, fault.FailedPrecondition) || !strings.Contains(err.Error(), "no tlshd listens") || !strings.Contains(err.Error(), "sec=krb5p,xprtsec=mtls") {
		t.Fatalf("Mount = %v, want the checker's FailedPrecondition", err)
	}
	if len(d.asked) != 1 || len(d.asked[0]) != 2 {
		t.Errorf("the checker was asked %v", d.asked)
	}
	if _, err := os.Stat(argsFile); err == nil {
		t.Error("mount(8) ran without its daemons")
	}
	if err := s.Mount(context.Background(), "s:/share", t.TempDir(), []string{"xprtsec=ssl"}); !fault.Is(err, fault.InvalidArgument) {
		t.Errorf("an unknown xprtsec: %v", err)
	}
}

// TestMountWithLessSecurityIsRefused: mount(8) succeeds, but the mount
// table shows sec=sys where the options ask for krb5p: the call fails
// FailedPrecondition naming what the mount has; a mount that has what it
// asks for, and one that asks for nothing, pass without asking for daemons.
func TestMountWithLessSecurityIsRefused(t *testing.T) {
	scriptMount(t, "exit 0")
	target := t.TempDir()
	info := filepath.Join(t.TempDir(), "mountinfo")
	line := func(super string) {
		os.WriteFile(info, []byte("40 35 0:50 / "+target+" rw,relatime - nfs4 nfs.example.com:/share rw,vers=4.2,"+super+"\n"), 0o644)
	}
	s := NewSystem()
	s.mountInfo = info
	d := &daemons{}
	s.Daemons = d

	line("sec=sys,clientaddr=10.0.0.2")
	err := s.Mount(context.Background(), "nfs.example.com:/share", target, []string{"sec=krb5p"})
	if !fault.Is(err, fault.FailedPrecondition) || !strings.Contains(err.Error(), "sec=sys") || !strings.Contains(err.Error(), "ask for sec=krb5p") {
		t.Fatalf("Mount = %v, want FailedPrecondition naming sec=sys", err)
	}
	line("sec=krb5p,xprtsec=tls")
	if err := s.Mount(context.Background(), "nfs.example.com:/share", target, []string{"sec=krb5p", "xprtsec=tls"}); err != nil {
		t.Errorf("a mount with what it asks for: %v", err)
	}
	line("sec=sys")
	if err := s.Mount(context.Background(), "nfs.example.com:/share", target, []string{"xprtsec=tls"}); !fault.Is(err, fault.FailedPrecondition) {
		t.Errorf("a mount without the TLS it asks for: %v", err)
	}
	asked := len(d.asked)
	if err := s.Mount(context.Background(), "nfs.example.com:/share", target, []string{"hard"}); err != nil {
		t.Errorf("a mount that asks for nothing: %v", err)
	}
	if len(d.asked) != asked {
		t.Errorf("daemons were checked for a mount that needs none")
	}
}
