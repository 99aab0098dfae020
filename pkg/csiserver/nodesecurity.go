package csiserver

import (
	"strings"

	"github.com/nfsdir/nfsdir/pkg/mountsec"
	"github.com/nfsdir/nfsdir/pkg/targetdir"
)

// mountSecurity counts this node's NFS mounts of the driver's volumes by
// the security the mount table shows them with ("sec=krb5p,xprtsec=mtls"):
// the targets this process published and those kubelet records for the
// driver (so a restarted plugin counts them too). The mount table is read
// once.
func (s *Node) mountSecurity() map[string]float64 {
	table, err := s.mounter.Table()
	if err != nil {
		return nil
	}
	targets := targetdir.PublishedAll(s.targets, s.driverName)
	if targets == nil {
		targets = map[string]string{}
	}
	s.mu.Lock()
	for id, ts := range s.published {
		for t := range ts {
			targets[t] = id
		}
	}
	s.mu.Unlock()
	out := map[string]float64{}
	for t, id := range targets {
		e, ok := table[t]
		if !ok || !strings.HasPrefix(e.FsType, "nfs") || !carries(s.names, id, e.Source) {
			continue
		}
		out[mountsec.Mounted(e.Options).String()]++
	}
	return out
}
