package csiserver

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"k8s.io/klog/v2"

	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/mountopts"
	"github.com/nfsdir/nfsdir/pkg/mounttable"
	"github.com/nfsdir/nfsdir/pkg/nfsmount"
)

// checkOptions compares the options p's new mount asked for with those
// the mount table shows it got. The Linux client gives mounts of one
// server one client (nconnect, timeo, retrans come from the first) and
// mounts of one export one superblock and cache (the first mount's
// options win) unless a mount asks for nosharecache. A difference is an
// error (FailedPrecondition, the mount undone) with strictMountOptions;
// otherwise it is logged as a warning, noted for NodeGetVolumeHealth and
// counted in nfsdir_node_mount_option_differences.
func (s *Node) checkOptions(ctx context.Context, p publication) error {
	table, err := s.mounter.Table()
	if err != nil {
		klog.ErrorS(err, "reading the mount table to compare mount options", "target", p.target)
		return nil
	}
	e, ok := table[p.target]
	if !ok {
		return nil
	}
	diffs := mountopts.Differences(p.opts, e.Options)
	if len(diffs) == 0 {
		s.noteOptions(p.target, "")
		return nil
	}
	msg := optionsMessage(p, diffs, sharing(table, p.target, e))
	if p.vol.StrictOptions {
		if err := s.mounter.Unmount(context.WithoutCancel(ctx), p.target); err != nil {
			klog.ErrorS(err, "unmounting a mount that did not get its options", "target", p.target)
		}
		return fault.New(fault.FailedPrecondition, "%s (the volume has strictMountOptions)", msg)
	}
	klog.Warningf("MountOptionsNotApplied: %s", msg)
	s.noteOptions(p.target, msg)
	return nil
}

// sharing lists the other NFS mounts of e's server: first those sharing
// its superblock (the same device), then the rest.
func sharing(table map[string]nfsmount.Entry, target string, e nfsmount.Entry) []string {
	host := mounttable.SourceHost(e.Source)
	var same, other []string
	for t, o := range table {
		if t == target || !strings.HasPrefix(o.FsType, "nfs") {
			continue
		}
		switch {
		case o.Device == e.Device:
			same = append(same, t)
		case mounttable.SourceHost(o.Source) == host:
			other = append(other, t)
		}
	}
	sort.Strings(same)
	sort.Strings(other)
	return append(same, other...)
}

func optionsMessage(p publication, diffs []mountopts.Difference, others []string) string {
	var got []string
	for _, d := range diffs {
		got = append(got, d.String())
	}
	cause := "no other mount of its server is left to explain it"
	if len(others) > 0 {
		cause = fmt.Sprintf("Linux gives mounts of one export one cache with the first mount's options, and mounts of one server one client: this node also mounts %s at %s", p.vol.Export.Server, others[0])
		if len(others) > 1 {
			cause += fmt.Sprintf(" (and %d more)", len(others)-1)
		}
	}
	return fmt.Sprintf("mount %q on %q did not get the options it asked for: %s; %s. Give every class of this server the same options, or add nosharecache to the class's mountOptions",
		p.source, p.target, strings.Join(got, ", "), cause)
}

// noteOptions keeps (or with "" drops) what target's mount did not get.
func (s *Node) noteOptions(target, msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if msg == "" {
		delete(s.optionNotes, target)
		return
	}
	if s.optionNotes == nil {
		s.optionNotes = map[string]string{}
	}
	s.optionNotes[target] = msg
}

// inheritNote gives a target bound from a staging path what the staging
// path's mount did not get: the same mount, the same options.
func (s *Node) inheritNote(staging, target string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if msg, ok := s.optionNotes[staging]; ok {
		s.optionNotes[target] = msg
	}
}

// optionHealth is the health entry of a target whose mount did not get
// its options, or nil.
func (s *Node) optionHealth(target string) *csi.VolumeHealth_VolumeHealthEntry {
	s.mu.Lock()
	msg, ok := s.optionNotes[target]
	s.mu.Unlock()
	if !ok {
		return nil
	}
	return &csi.VolumeHealth_VolumeHealthEntry{Status: csi.VolumeHealthErrorType_DEGRADED, Reason: "MountOptionsNotApplied", Message: msg}
}

// optionDifferences counts the published targets whose mounts did not get
// their options.
func (s *Node) optionDifferences() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return float64(len(s.optionNotes))
}
