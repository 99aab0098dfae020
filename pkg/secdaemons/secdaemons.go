// Package secdaemons tells whether the daemons a secure NFS mount needs
// are there to answer the kernel, before anything is mounted: a mount
// whose handshake or credentials nobody provides does not fail, it waits
// out its timeouts. tlshd is there when a socket of this network namespace
// listens to the kernel's TLS handshake requests (the "tlshd" group of the
// "handshake" generic netlink family, the kernel's own test); rpc.gssd when
// a process of that name runs in this network namespace.
package secdaemons

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/mountsec"
)

// Checker checks that the daemons a mount needs are running.
type Checker interface {
	// Check returns nil when every daemon of needs answers the kernel
	// here, and a FailedPrecondition error naming what is missing
	// otherwise.
	Check(ctx context.Context, needs []mountsec.Daemon) error
}

// System checks the running machine.
type System struct {
	// ProcRoot is the /proc whose processes are searched for rpc.gssd:
	// the host's (mounted into the pod) when the host runs its daemons,
	// or the pod's own when they are its sidecars sharing its process
	// namespace.
	ProcRoot string
	// Where names where the daemons are meant to run, for the errors
	// ("the node plugin's sidecars", "the host").
	Where string
	// netlink answers the kernel's questions; nil is the kernel itself.
	netlink netlinker
}

// netlinker is what System asks the kernel: the generic netlink family's
// multicast groups (ok false when the kernel has no such family) and
// whether a socket of this network namespace is subscribed to a group.
type netlinker interface {
	groups(family string) (groups map[string]uint32, ok bool, err error)
	listened(protocol int, group uint32) (bool, error)
}

// DefaultWhere is where the errors say to run a missing daemon.
const DefaultWhere = "on the node, in the network namespace that mounts"

// NewSystem returns the Checker of this machine, searching procRoot for
// processes.
func NewSystem(procRoot, where string) *System {
	return &System{ProcRoot: procRoot, Where: where}
}

// Check implements Checker.
func (s *System) Check(ctx context.Context, needs []mountsec.Daemon) error {
	var missing []string
	for _, d := range needs {
		var err error
		switch d {
		case mountsec.Tlshd:
			err = s.tlshd()
		case mountsec.Gssd:
			err = s.gssd()
		default:
			err = fmt.Errorf("no check for %s", d)
		}
		if err != nil {
			missing = append(missing, err.Error())
		}
		if ctx.Err() != nil {
			return fault.Wrap(fault.DeadlineExceeded, ctx.Err(), "checking %s", d)
		}
	}
	if len(missing) > 0 {
		return fault.New(fault.FailedPrecondition, "%s", strings.Join(missing, "; "))
	}
	return nil
}

func (s *System) kernel() netlinker {
	if s.netlink != nil {
		return s.netlink
	}
	return kernelNetlink{}
}

// tlshd reports why the kernel's TLS handshake requests would find no
// tlshd here, or nil when one listens.
func (s *System) tlshd() error {
	nl := s.kernel()
	groups, ok, err := nl.groups("handshake")
	if err != nil {
		return fmt.Errorf("cannot ask the kernel whether tlshd listens: %v", err)
	}
	if !ok {
		return errors.New("this node's kernel has no TLS handshake upcall (RPC-with-TLS mounts, xprtsec=tls and mtls, need Linux 6.5 or later)")
	}
	g, ok := groups["tlshd"]
	if !ok {
		return errors.New("this node's kernel has a handshake upcall without the tlshd group")
	}
	on, err := nl.listened(netlinkGeneric, g)
	if err != nil {
		return fmt.Errorf("cannot ask the kernel whether tlshd listens: %v", err)
	}
	if !on {
		return fmt.Errorf("no tlshd listens for the kernel's TLS handshakes in this node's network namespace: run it (%s)", s.Where)
	}
	return nil
}

// gssd reports why no rpc.gssd would answer the kernel here, or nil when
// one runs in this network namespace.
func (s *System) gssd() error {
	self, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		return fmt.Errorf("cannot read this process's network namespace: %v", err)
	}
	found, err := runningIn(s.ProcRoot, "rpc.gssd", self)
	if err != nil {
		return fmt.Errorf("cannot look for rpc.gssd in %s: %v", s.ProcRoot, err)
	}
	if !found {
		return fmt.Errorf("no rpc.gssd runs in this node's network namespace (searched %s): run it (%s)", s.ProcRoot, s.Where)
	}
	return nil
}

// runningIn reports whether a process named comm runs below procRoot in
// the network namespace netns (as /proc/PID/ns/net reads). Processes that
// end while they are read are skipped.
func runningIn(procRoot, comm, netns string) (bool, error) {
	ents, err := os.ReadDir(procRoot)
	if err != nil {
		return false, err
	}
	for _, e := range ents {
		if !e.IsDir() || strings.TrimLeft(e.Name(), "0123456789") != "" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(procRoot, e.Name(), "comm"))
		if err != nil || strings.TrimSpace(string(b)) != comm {
			continue
		}
		if ns, err := os.Readlink(filepath.Join(procRoot, e.Name(), "ns", "net")); err == nil && ns == netns {
			return true, nil
		}
	}
	return false, nil
}
