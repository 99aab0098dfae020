package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/nfsdir/nfsdir/pkg/config"
	"github.com/nfsdir/nfsdir/pkg/export"
	"github.com/nfsdir/nfsdir/pkg/mountopts"
	"github.com/nfsdir/nfsdir/pkg/nfsmount"
	"github.com/nfsdir/nfsdir/pkg/params"
	"github.com/nfsdir/nfsdir/pkg/provision"
	"github.com/nfsdir/nfsdir/pkg/shares"
	"github.com/nfsdir/nfsdir/pkg/volumeid"
)

// adoptArgs are the arguments of `nfsdir adopt`.
type adoptArgs struct {
	server, share, subDir, name, onDelete, mountOptions, stateDir, driver, legacyID string
	claim, clusterID                                                                string
	capacity                                                                        int64
	timeout                                                                         time.Duration
}

func parseAdopt(args []string) (adoptArgs, error) {
	a := adoptArgs{}
	fs := adoptFlags(&a)
	if err := fs.Parse(args); err != nil {
		return a, err
	}
	if a.legacyID != "" {
		l, err := volumeid.ParseLegacy(a.legacyID)
		if err != nil {
			return a, fmt.Errorf("--legacy-id: %v", err)
		}
		a.server, a.share, a.subDir = cmp.Or(a.server, l.Export.Server), cmp.Or(a.share, l.Export.Share), cmp.Or(a.subDir, l.SubDir)
	}
	if a.server == "" || a.share == "" || a.subDir == "" {
		return a, fmt.Errorf("--server, --share and --subdir are required")
	}
	if err := checkClaimRef(a.claim); err != nil {
		return a, err
	}
	if err := config.CheckClusterID(a.clusterID); err != nil {
		return a, err
	}
	if (a.claim == "") != (a.clusterID == "") {
		return a, fmt.Errorf("--claim and --cluster-id go together: a StorageClass's reuseDirectory needs both in the record")
	}
	a.subDir = strings.Trim(a.subDir, "/")
	if a.name == "" {
		a.name = "adopted-" + filepath.Base(a.subDir)
	}
	return a, nil
}

// adoptFlags defines the flags of nfsdir adopt, filling a.
func adoptFlags(a *adoptArgs) *pflag.FlagSet {
	fs := pflag.NewFlagSet("nfsdir adopt", pflag.ContinueOnError)
	fs.StringVar(&a.server, "server", "", "NFS server (required)")
	fs.StringVar(&a.share, "share", "", "exported path (required)")
	fs.StringVar(&a.subDir, "subdir", "", "existing directory below the share to hand over (required)")
	fs.StringVar(&a.name, "name", "", "volume name to record (default: the PV name to create, adopted-<last subdir element>)")
	fs.StringVar(&a.onDelete, "on-delete", "retain", "what DeleteVolume will do with it: retain, archive or delete")
	fs.StringVar(&a.mountOptions, "mount-options", "", "mount options for the share, comma separated (as the StorageClass mountOptions)")
	fs.StringVar(&a.stateDir, "state-dir", config.DefaultStateDir, "the controller's --state-dir")
	fs.StringVar(&a.driver, "driver-name", config.DefaultDriverName, "the driver name, for the printed PersistentVolume")
	fs.StringVar(&a.legacyID, "legacy-id", "", "csi-driver-nfs volume handle (server#share#subDir#uuid#onDelete) of the PersistentVolume that keeps using the directory while nfsdir serves under csi-driver-nfs's name; DeleteVolume of that handle then follows --on-delete. Sets --server, --share and --subdir when they are not given")
	fs.StringVar(&a.claim, "claim", "", "namespace/name of the claim the directory is for, recorded so that a claim of that namespace and name gets it from a StorageClass with reuseDirectory (with --cluster-id)")
	fs.StringVar(&a.clusterID, "cluster-id", "", "the identity of the cluster whose claim it is (the controller's --cluster-id, or its kube-system namespace's UID), recorded with --claim")
	fs.Int64Var(&a.capacity, "capacity", 0, "capacity in bytes to record (informational; NFS directories have no quota)")
	fs.DurationVar(&a.timeout, "mount-timeout", config.DefaultMountTimeout, "how long mounting the share may take")
	return fs
}

// runAdopt hands an existing directory over to nfsdir (see provision.Adopt)
// and prints the volume ID and a PersistentVolume that uses it. It mounts
// the share under its own directory so that it never disturbs the running
// controller's mounts.
func runAdopt(args []string, out io.Writer) error {
	a, err := parseAdopt(args)
	if err != nil {
		return err
	}
	e, err := export.New(a.server, a.share)
	if err != nil {
		return err
	}
	policy, err := params.ParseOnDelete(a.onDelete)
	if err != nil {
		return fmt.Errorf("--on-delete: %v", err)
	}
	opts, err := mountopts.Parse(a.mountOptions)
	if err != nil {
		return fmt.Errorf("--mount-options: %v", err)
	}
	// The controller's state directory gets the options of the printed ID
	// (when too long for it); the share is mounted under a directory of
	// this run's own, so the running controller's mounts are never
	// disturbed.
	registry, err := shares.New(shares.Config{StateDir: a.stateDir, MountTimeout: a.timeout}, nfsmount.NewSystem())
	if err != nil {
		return err
	}
	own, err := shares.New(shares.Config{StateDir: filepath.Join(a.stateDir, "adopt", fmt.Sprint(os.Getpid())), MountTimeout: a.timeout}, nfsmount.NewSystem())
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), a.timeout+time.Minute)
	defer cancel()
	defer own.Close(ctx)
	var rec *provision.Record
	var shareOpts mountopts.Options
	err = own.On(ctx, e, opts, true, func(area *provision.Area, share *shares.Share) (err error) {
		shareOpts = share.Options
		rec, err = area.Adoptions().Adopt(provision.Request{Name: a.name, SubDir: a.subDir, OnDelete: policy, CapacityBytes: a.capacity, Options: share.Options.String(), LegacyID: a.legacyID, Claim: a.claim, Cluster: a.clusterID})
		return err
	})
	if err != nil {
		return err
	}
	id, err := registry.VolumeID(e, rec, shareOpts)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "adopted %s on %s as volume %q (onDelete=%s)\nvolume ID: %s\n\n", rec.SubDir, e, rec.Name, rec.OnDelete, id)
	if a.legacyID != "" {
		fmt.Fprintf(out, "The PersistentVolume with handle %q keeps working as it is; deleting it now follows onDelete=%s.\n", a.legacyID, rec.OnDelete)
		return nil
	}
	fmt.Fprintf(out, `# Bind the data with a PersistentVolume that uses this handle:
apiVersion: v1
kind: PersistentVolume
metadata:
  name: %s
spec:
  capacity:
    storage: %d
  accessModes: [ReadWriteMany]
  persistentVolumeReclaimPolicy: Delete
  mountOptions: [%s]
  csi:
    driver: %s
    volumeHandle: %q
    volumeAttributes:
      server: %q
      share: %q
      subDir: %q
`, rec.Name, max(a.capacity, 1), strings.Join(shareOpts, ", "), a.driver, id.String(), e.Server, e.Share, rec.SubDir)
	return nil
}

// checkClaimRef accepts "" or namespace/name.
func checkClaimRef(claim string) error {
	ns, name, ok := strings.Cut(claim, "/")
	if claim != "" && (!ok || ns == "" || name == "" || strings.Contains(name, "/")) {
		return fmt.Errorf("--claim %q: want namespace/name", claim)
	}
	return nil
}
