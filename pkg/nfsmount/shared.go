package nfsmount

import (
	"context"
	"net"
	"strings"
	"time"

	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/mountopts"
	"github.com/nfsdir/nfsdir/pkg/mountsec"
	"github.com/nfsdir/nfsdir/pkg/mounttable"
)

// resolveTimeout bounds the look-up of a server's addresses before a mount
// that asks for transport security.
const resolveTimeout = 5 * time.Second

// sharedConnection refuses, before anything is mounted, a mount of source
// that asks for transport security sec while this node mounts the same
// server (one of the addresses its name resolves to) over NFSv4 with
// another: the kernel would send the new mount's calls on that mount's
// connection (see mountsec.Security.Sharing). A name that does not resolve
// is left to mount(8) to report.
func (s *System) sharedConnection(ctx context.Context, source, target string, options mountopts.Options, sec mountsec.Security) error {
	if sec.Transport == "" {
		return nil
	}
	host := mounttable.SourceHost(source)
	addrs := []string{host}
	if net.ParseIP(host) == nil {
		rctx, cancel := context.WithTimeout(ctx, resolveTimeout)
		defer cancel()
		var err error
		if addrs, err = net.DefaultResolver.LookupHost(rctx, host); err != nil {
			return nil
		}
	}
	infos, err := s.table()
	if err != nil {
		return err
	}
	table := make([]mountsec.Listed, 0, len(infos))
	for _, mi := range infos {
		if strings.HasPrefix(mi.FsType, "nfs") {
			table = append(table, mountsec.Listed{Target: mi.MountPoint, FsType: mi.FsType, Options: append(mi.MountOptions, mi.SuperOptions...)})
		}
	}
	shared := sec.Sharing(options, addrs, table)
	if len(shared) == 0 {
		return nil
	}
	return fault.New(fault.FailedPrecondition, "mount %q on %q with %s: this node mounts the same server (%s) with %s at %q (%d such mount(s)); "+
		"Linux gives all NFSv4 mounts of a server on a node one connection, so this mount would travel on that one, not with the security asked: "+
		"mount every volume of this server with the same xprtsec on the node (in every StorageClass and PersistentVolume that names it), or unmount the others first",
		source, target, sec, strings.Join(addrs, ", "), mountsec.Mounted(shared[0].Options), shared[0].Target, len(shared))
}
