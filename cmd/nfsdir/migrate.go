package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"

	"github.com/nfsdir/nfsdir/pkg/config"
	"github.com/nfsdir/nfsdir/pkg/kubeapi"
	"github.com/nfsdir/nfsdir/pkg/migrate"
	"github.com/nfsdir/nfsdir/pkg/mountopts"
	"github.com/nfsdir/nfsdir/pkg/nfsmount"
	"github.com/nfsdir/nfsdir/pkg/params"
	"github.com/nfsdir/nfsdir/pkg/provision"
	"github.com/nfsdir/nfsdir/pkg/shares"
)

// migrateArgs are the arguments of `nfsdir migrate`.
type migrateArgs struct {
	from, kubeconfig, driver, stateNS, stateDir, selector string
	clusterID                                             string
	pvs, namespaces                                       []string
	apply, rollback                                       bool
	mountTimeout, wait                                    time.Duration
}

func parseMigrate(args []string) (migrateArgs, error) {
	var a migrateArgs
	fs := migrateFlags(&a)
	if err := fs.Parse(args); err != nil {
		return a, err
	}
	if a.from != migrate.FromCSIDriverNFS && a.from != migrate.FromNFSSubdir {
		return a, fmt.Errorf("--from %q: want %s or %s", a.from, migrate.FromCSIDriverNFS, migrate.FromNFSSubdir)
	}
	if fs.NArg() > 0 {
		return a, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return a, config.CheckClusterID(a.clusterID)
}

// migrateFlags defines the flags of nfsdir migrate, filling a.
func migrateFlags(a *migrateArgs) *pflag.FlagSet {
	fs := pflag.NewFlagSet("nfsdir migrate", pflag.ContinueOnError)
	fs.StringVar(&a.from, "from", "", "the incumbent: "+migrate.FromCSIDriverNFS+" or "+migrate.FromNFSSubdir+" (required)")
	fs.StringVar(&a.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or the pod's service account)")
	fs.StringVar(&a.driver, "driver-name", config.DefaultDriverName, "nfsdir's driver name; "+migrate.CSIDriverNFSName+" (nfsdir installed in csi-driver-nfs's place) keeps csi-driver-nfs PVs as they are")
	fs.StringSliceVar(&a.pvs, "pv", nil, "only these PVs (repeatable or comma separated)")
	fs.StringSliceVar(&a.namespaces, "namespace", nil, "only PVs bound to claims in these namespaces")
	fs.StringVarP(&a.selector, "selector", "l", "", "only PVs with these labels (a label selector)")
	fs.BoolVar(&a.apply, "apply", false, "carry the plan, or with --rollback the rollback, out (default: print it and change nothing)")
	fs.BoolVar(&a.rollback, "rollback", false, "restore the PVs an earlier --apply saved and release their directories (with --apply; without it, say what would be restored)")
	fs.StringVar(&a.stateNS, "state-namespace", "kube-system", "namespace of the ConfigMaps that keep the saved PVs")
	fs.StringVar(&a.stateDir, "state-dir", config.DefaultStateDir, "directory for this run's share mounts (below migrate/<pid>) and the controller's long mount options")
	fs.DurationVar(&a.mountTimeout, "mount-timeout", config.DefaultMountTimeout, "how long mounting a share may take")
	fs.StringVar(&a.clusterID, "cluster-id", "", "the cluster's identity to record with each adopted directory and its claim, for StorageClasses with reuseDirectory (the controller's --cluster-id; default: the kube-system namespace's UID)")
	fs.DurationVar(&a.wait, "wait", 2*time.Minute, "how long to wait for the API server (an old PV object gone, a claim bound again)")
	return fs
}

// selected returns the plan's PV filter for the flags.
func (a migrateArgs) selected(pv *corev1.PersistentVolume) bool {
	if len(a.pvs) > 0 && !slices.Contains(a.pvs, pv.Name) {
		return false
	}
	if len(a.namespaces) > 0 && (pv.Spec.ClaimRef == nil || !slices.Contains(a.namespaces, pv.Spec.ClaimRef.Namespace)) {
		return false
	}
	return true
}

// runMigrate moves the incumbent's PVs over (see package migrate): it
// prints the plan, and with --apply carries it out, with --rollback undoes
// an earlier --apply.
func runMigrate(args []string, out io.Writer) error {
	a, err := parseMigrate(args)
	if err != nil {
		return err
	}
	kube, err := kubeapi.FromKubeconfig(a.kubeconfig, "nfsdir-migrate")
	if err != nil {
		return err
	}
	ctx := context.Background()
	if a.clusterID == "" && !a.rollback {
		if a.clusterID, err = kube.ClusterUID(ctx); err != nil {
			return fmt.Errorf("the cluster's identity (or give --cluster-id): %w", err)
		}
	}
	sh, closeShares, err := newMigrationShares(a)
	if err != nil {
		return err
	}
	defer closeShares()
	o := migrate.Options{Namespace: a.stateNS, Driver: a.driver, Wait: a.wait, Log: out, DryRun: !a.apply}
	if a.rollback {
		res, err := migrate.Rollback(ctx, kube, sh, a.from, func(pv string) bool { return len(a.pvs) == 0 || slices.Contains(a.pvs, pv) }, o)
		if err != nil {
			return err
		}
		if o.DryRun {
			err := summary(out, "can be rolled back", res)
			fmt.Fprintln(out, "Nothing changed: run again with --rollback --apply to carry the rollback out.")
			return err
		}
		return summary(out, "rolled back", res)
	}
	plan, err := planFromCluster(ctx, kube, a)
	if err != nil {
		return err
	}
	plan = migrate.Vet(ctx, plan, sh)
	printPlan(out, plan)
	if !a.apply {
		fmt.Fprintln(out, "\nNothing changed: run again with --apply to carry the plan out.")
		return nil
	}
	return summary(out, "migrated", migrate.Apply(ctx, kube, sh, plan, o))
}

// planFromCluster lists what the plan needs and makes it.
func planFromCluster(ctx context.Context, kube *kubeapi.Client, a migrateArgs) (migrate.Plan, error) {
	pvs, err := kube.PVs(ctx, "")
	if err != nil {
		return migrate.Plan{}, fmt.Errorf("list PVs: %w", err)
	}
	claims, err := kube.Claims(ctx)
	if err != nil {
		return migrate.Plan{}, fmt.Errorf("list claims: %w", err)
	}
	classes, err := kube.StorageClasses(ctx)
	if err != nil {
		return migrate.Plan{}, fmt.Errorf("list StorageClasses: %w", err)
	}
	sel := a.selected
	if a.selector != "" {
		matching, err := kube.PVs(ctx, a.selector)
		if err != nil {
			return migrate.Plan{}, fmt.Errorf("--selector: %w", err)
		}
		names := map[string]bool{}
		for _, pv := range matching {
			names[pv.Name] = true
		}
		sel = func(pv *corev1.PersistentVolume) bool { return names[pv.Name] && a.selected(pv) }
	}
	saved, err := kube.ConfigMaps(ctx, a.stateNS, migrate.LabelMigration+"="+a.from)
	if err != nil {
		return migrate.Plan{}, fmt.Errorf("list saved PVs in namespace %s: %w", a.stateNS, err)
	}
	return migrate.MakePlan(migrate.Input{From: a.from, Driver: a.driver, PVs: pvs, Claims: claims,
		Classes: classes, Saved: migrate.Saved(saved), Selected: sel})
}

func printPlan(out io.Writer, plan migrate.Plan) {
	if len(plan.Items) == 0 {
		fmt.Fprintf(out, "No PV of %s found.\n", plan.From)
		return
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "PV\tCLAIM\tDIRECTORY\tON DELETE\tPLAN")
	for _, it := range plan.Items {
		dir, what := "-", string(it.Action)
		if it.SubDir != "" {
			dir = it.Share.Export.Source(it.SubDir)
		}
		if it.Reason != "" {
			what += ": " + it.Reason
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", it.PV, it.Claim, dir, strings.TrimSpace(string(it.OnDelete)), what)
	}
	w.Flush()
	n := plan.Counts()
	fmt.Fprintf(out, "\n%d to adopt and keep, %d to adopt and replace, %d migrated already, %d refused.\n",
		n[migrate.Keep], n[migrate.Replace], n[migrate.Done], n[migrate.Refuse])
}

func summary(out io.Writer, what string, res []migrate.Result) error {
	failed := 0
	for _, r := range res {
		if r.Err != nil {
			failed++
		}
	}
	fmt.Fprintf(out, "%d PVs %s, %d failed (run the same command again to resume).\n", len(res)-failed, what, failed)
	if failed > 0 {
		return fmt.Errorf("%d of %d PVs failed", failed, len(res))
	}
	return nil
}

// migrationShares adopts and releases directories through share mounts of
// this run's own, as `nfsdir adopt` does; the volume IDs it returns use
// the controller's state directory for long mount options.
type migrationShares struct {
	registry, own *shares.Set
	cluster       string // recorded with each directory and its claim
}

func newMigrationShares(a migrateArgs) (migrationShares, func(), error) {
	registry, err := shares.New(shares.Config{StateDir: a.stateDir, MountTimeout: a.mountTimeout}, nfsmount.NewSystem())
	if err != nil {
		return migrationShares{}, nil, err
	}
	own, err := shares.New(shares.Config{StateDir: filepath.Join(a.stateDir, "migrate", fmt.Sprint(os.Getpid())), MountTimeout: a.mountTimeout}, nfsmount.NewSystem())
	if err != nil {
		return migrationShares{}, nil, err
	}
	closeAll := func() {
		ctx, cancel := context.WithTimeout(context.Background(), a.mountTimeout+time.Minute)
		defer cancel()
		own.Close(ctx)
	}
	return migrationShares{registry, own, a.clusterID}, closeAll, nil
}

func (m migrationShares) Adopt(ctx context.Context, it migrate.Item) (string, map[string]string, error) {
	opts, err := mountopts.Parse(strings.Join(it.Share.MountOptions, ","))
	if err != nil {
		return "", nil, fmt.Errorf("mount options of StorageClass %s: %w", it.Share.Class, err)
	}
	var rec *provision.Record
	var shareOpts mountopts.Options
	err = m.own.On(ctx, it.Share.Export, opts, true, func(area *provision.Area, share *shares.Share) (err error) {
		shareOpts = share.Options
		rec, err = area.Adoptions().Adopt(adoptRequest(it, share.Options.String(), m.cluster))
		return err
	})
	if err != nil {
		return "", nil, err
	}
	id, err := m.registry.VolumeID(it.Share.Export, rec, shareOpts)
	if err != nil {
		return "", nil, err
	}
	return id.String(), map[string]string{params.KeyServer: it.Share.Export.Server, params.KeyShare: it.Share.Export.Share, "subDir": rec.SubDir}, nil
}

func (m migrationShares) Check(ctx context.Context, it migrate.Item) error {
	opts, err := mountopts.Parse(strings.Join(it.Share.MountOptions, ","))
	if err != nil {
		return fmt.Errorf("mount options of StorageClass %s: %w", it.Share.Class, err)
	}
	err = m.own.On(ctx, it.Share.Export, opts, false, func(area *provision.Area, _ *shares.Share) error {
		return area.Adoptions().Can(adoptRequest(it, "", m.cluster))
	})
	if errors.Is(err, provision.ErrNoArea) {
		return nil // nothing recorded on that share yet
	}
	return err
}

// adoptRequest is the adoption of it's directory, recording its claim and
// cluster.
func adoptRequest(it migrate.Item, options, cluster string) provision.Request {
	return provision.Request{Name: it.PV, SubDir: it.SubDir, OnDelete: it.OnDelete,
		CapacityBytes: it.CapacityBytes, Options: options, LegacyID: it.LegacyID, Claim: it.Claim, Cluster: cluster}
}

func (m migrationShares) Release(ctx context.Context, it migrate.Item) error {
	opts, err := mountopts.Parse(strings.Join(it.Share.MountOptions, ","))
	if err != nil {
		return err
	}
	err = m.own.On(ctx, it.Share.Export, opts, false, func(area *provision.Area, _ *shares.Share) error {
		return area.Adoptions().Undo(it.PV, it.SubDir)
	})
	if errors.Is(err, provision.ErrNoArea) {
		return nil
	}
	return err
}
