// Package migrate moves PersistentVolumes of kubernetes-csi/csi-driver-nfs
// and nfs-subdir-external-provisioner over to nfsdir without copying data:
// each volume's directory is adopted (a record on the share, nothing
// inside it touched) and the PV is either kept as it is (nfsdir serving
// under csi-driver-nfs's name: "drop-in") or replaced by an nfsdir PV of
// the same name, bound to the same claim.
//
// Plan decides, from the objects alone and without any I/O, what to do
// with each PV and why a PV cannot be moved safely; Apply and Rollback
// carry a plan out through small interfaces to the Kubernetes API and to
// the shares.
package migrate

import (
	"cmp"
	"fmt"
	"path"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nfsdir/nfsdir/pkg/export"
	"github.com/nfsdir/nfsdir/pkg/params"
	"github.com/nfsdir/nfsdir/pkg/safepath"
	"github.com/nfsdir/nfsdir/pkg/volumeid"
)

// The incumbents, as --from names them.
const (
	FromCSIDriverNFS = "csi-driver-nfs"
	FromNFSSubdir    = "nfs-subdir-external-provisioner"
)

// What identifies each incumbent's PVs: csi-driver-nfs's CSI driver name,
// and the provisioned-by annotation nfs-subdir-external-provisioner writes
// with its default provisioner name.
const (
	CSIDriverNFSName  = "nfs.csi.k8s.io"
	NFSSubdirName     = "k8s-sigs.io/nfs-subdir-external-provisioner"
	AnnProvisionedBy  = "pv.kubernetes.io/provisioned-by"
	AnnProvisionedBy2 = "volume.kubernetes.io/provisioned-by"
	AnnMigratedFrom   = "nfsdir.csi.io/migrated-from"
	// AnnSaved, on the PV a migration kept or made, is the digest of the
	// saved copy of the PV it replaced (its ConfigMap's data): a rollback
	// restores only a saved copy the PV vouches for.
	AnnSaved           = "nfsdir.csi.io/saved-pv-digest"
	LabelMigration     = "nfsdir.csi.io/migration"
	nfsSubdirOnDelete  = "onDelete"
	nfsSubdirArchiveOn = "archiveOnDelete"
)

// Share is a share nfsdir serves, known from one of its StorageClasses.
type Share struct {
	Export       export.Export
	MountOptions []string
	Class        string // the StorageClass it came from
}

// Input is what Plan looks at.
type Input struct {
	From string // FromCSIDriverNFS or FromNFSSubdir
	// Driver is nfsdir's driver name. When it is csi-driver-nfs's own
	// (nfsdir installed in its place), csi-driver-nfs PVs are kept as
	// they are.
	Driver string
	// PVs are all the cluster's PersistentVolumes: the incumbent's are
	// selected from them, and the others are checked for directories
	// the selected ones share.
	PVs    []corev1.PersistentVolume
	Claims []corev1.PersistentVolumeClaim
	// Classes are the cluster's StorageClasses: nfsdir's give the known
	// shares, nfs-subdir's its onDelete parameters.
	Classes []storagev1.StorageClass
	// Saved are the plan items an earlier Apply saved (Saved), by PV
	// name: one whose PV object is gone was interrupted between deleting
	// the old PV and creating nfsdir's, and is resumed.
	Saved map[string]Item
	// Selected, when set, limits the plan to the PVs it accepts (names,
	// namespaces, label selectors); the others are left out of the plan.
	Selected func(*corev1.PersistentVolume) bool
}

// Action is what Apply does with one PV.
type Action string

// The actions of a plan.
const (
	// Keep adopts the directory and keeps the PV (drop-in).
	Keep Action = "adopt, keep the PV"
	// Replace adopts the directory and replaces the PV by an nfsdir PV
	// of the same name bound to the same claim.
	Replace Action = "adopt, replace the PV"
	// Done: the PV is nfsdir's already, from an earlier run.
	Done Action = "migrated"
	// Refuse: the PV is left alone, for Reason.
	Refuse Action = "refused"
)

// Item is the plan for one PV.
type Item struct {
	PV     string
	Claim  string // namespace/name
	Action Action
	Reason string // why, when refused
	// Where the directory is: a share nfsdir knows and the path below it.
	Share  Share
	SubDir string
	// OnDelete is what deleting the claim will do once migrated: the
	// incumbent's own policy for this PV.
	OnDelete params.OnDelete
	// LegacyID is the csi-driver-nfs volume handle the PV keeps (Keep).
	LegacyID string
	// CapacityBytes is the PV's capacity.
	CapacityBytes int64
}

// Plan is the plan for the selected PVs, in PV name order.
type Plan struct {
	From  string
	Items []Item
}

// Counts returns how many items have each action.
func (p Plan) Counts() map[Action]int {
	n := map[Action]int{}
	for _, it := range p.Items {
		n[it.Action]++
	}
	return n
}

// MakePlan plans the migration of in's incumbent PVs.
func MakePlan(in Input) (Plan, error) {
	if in.From != FromCSIDriverNFS && in.From != FromNFSSubdir {
		return Plan{}, fmt.Errorf("--from %q: want %s or %s", in.From, FromCSIDriverNFS, FromNFSSubdir)
	}
	pl := planner{in: in, shares: knownShares(in), classes: map[string]*storagev1.StorageClass{}, claims: map[string]*corev1.PersistentVolumeClaim{}}
	for i := range in.Classes {
		pl.classes[in.Classes[i].Name] = &in.Classes[i]
	}
	for i := range in.Claims {
		c := &in.Claims[i]
		pl.claims[c.Namespace+"/"+c.Name] = c
	}
	// Where every PV of the cluster points, for the shared-directory check.
	for i := range in.PVs {
		if e, dir, ok := directoryOf(&in.PVs[i]); ok {
			pl.places = append(pl.places, place{e, dir, in.PVs[i].Name})
		}
	}
	plan := Plan{From: in.From}
	for i := range in.PVs {
		pv := &in.PVs[i]
		if !in.isIncumbents(pv) && !migratedFrom(pv, in) {
			continue
		}
		if in.Selected != nil && !in.Selected(pv) {
			continue
		}
		plan.Items = append(plan.Items, pl.item(pv))
	}
	for name, it := range in.Saved {
		if slices.ContainsFunc(in.PVs, func(pv corev1.PersistentVolume) bool { return pv.Name == name }) || it.Action != Replace {
			continue
		}
		if in.Selected != nil && !in.Selected(&corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}}) {
			continue
		}
		it.Reason = "resumed: the old PV object is deleted already"
		plan.Items = append(plan.Items, it)
	}
	slices.SortFunc(plan.Items, func(a, b Item) int { return cmp.Compare(a.PV, b.PV) })
	return plan, nil
}

// planner is what MakePlan knows of the cluster while it decides each PV.
type planner struct {
	in      Input
	shares  []Share
	classes map[string]*storagev1.StorageClass
	claims  map[string]*corev1.PersistentVolumeClaim
	places  []place
}

// item decides what becomes of pv: done already, refused (and why),
// replaced by an nfsdir PV, or kept with its handle (drop-in).
func (pl planner) item(pv *corev1.PersistentVolume) Item {
	in := pl.in
	it := Item{PV: pv.Name}
	if ref := pv.Spec.ClaimRef; ref != nil {
		it.Claim = ref.Namespace + "/" + ref.Name
	}
	if q, ok := pv.Spec.Capacity[corev1.ResourceStorage]; ok {
		it.CapacityBytes = q.Value()
	}
	refuse := func(format string, args ...any) Item {
		it.Action, it.Reason = Refuse, fmt.Sprintf(format, args...)
		return it
	}
	e, dir, ok := directoryOf(pv)
	if migratedFrom(pv, in) {
		it.Action = Done
		if ok {
			it.Share, it.SubDir, _ = locate(pl.shares, e, dir)
		}
		return it
	}
	if !ok {
		return refuse("its volume source is not an NFS directory nfsdir can read (%s)", sourceKind(pv))
	}
	it.Share, it.SubDir, it.Reason = locate(pl.shares, e, dir)
	if it.Reason != "" {
		it.Action = Refuse
		return it
	}
	if l, _ := legacyOf(pv); in.dropIn() && l.Export != it.Share.Export {
		return refuse("its handle, which it keeps, names share %s, and no nfsdir StorageClass has exactly that share (the closest is %s of StorageClass %s)", l.Export, it.Share.Export, it.Share.Class)
	}
	if why := checkBinding(pv, pl.claims); why != "" {
		return refuse("%s", why)
	}
	if other := sharedWith(pl.places, pl.shares, pv.Name, e, dir); other != "" {
		return refuse("%s", other)
	}
	it.OnDelete = onDeleteOf(pv, pl.classes)
	it.Action = Replace
	if in.dropIn() {
		it.Action, it.LegacyID = Keep, pv.Spec.CSI.VolumeHandle
	}
	return it
}

// legacyOf parses pv's csi-driver-nfs handle.
func legacyOf(pv *corev1.PersistentVolume) (volumeid.Legacy, error) {
	if pv.Spec.CSI == nil {
		return volumeid.Legacy{}, fmt.Errorf("not a CSI volume")
	}
	return volumeid.ParseLegacy(pv.Spec.CSI.VolumeHandle)
}

// dropIn reports whether csi-driver-nfs PVs stay as they are: nfsdir
// serves under csi-driver-nfs's name.
func (in Input) dropIn() bool { return in.From == FromCSIDriverNFS && in.Driver == CSIDriverNFSName }

// isIncumbents reports whether pv was made by the incumbent in.From.
func (in Input) isIncumbents(pv *corev1.PersistentVolume) bool {
	switch in.From {
	case FromCSIDriverNFS:
		if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != CSIDriverNFSName {
			return false
		}
		// In drop-in mode nfsdir's own new volumes carry the same
		// driver name: only csi-driver-nfs's handles are the incumbent's.
		_, err := volumeid.ParseLegacy(pv.Spec.CSI.VolumeHandle)
		return err == nil
	case FromNFSSubdir:
		return pv.Spec.NFS != nil && (pv.Annotations[AnnProvisionedBy] == NFSSubdirName || pv.Annotations[AnnProvisionedBy2] == NFSSubdirName)
	}
	return false
}

// migratedFrom reports whether pv is an nfsdir PV an earlier run made from
// in.From's.
func migratedFrom(pv *corev1.PersistentVolume, in Input) bool {
	return pv.Annotations[AnnMigratedFrom] == in.From && pv.Spec.CSI != nil && pv.Spec.CSI.Driver == in.Driver
}

// directoryOf returns the export and the absolute path on it of the NFS
// directory a PV mounts.
func directoryOf(pv *corev1.PersistentVolume) (export.Export, string, bool) {
	switch {
	case pv.Spec.NFS != nil:
		e, err := export.New(pv.Spec.NFS.Server, "/")
		if err != nil {
			return export.Export{}, "", false
		}
		return e, path.Clean("/" + pv.Spec.NFS.Path), true
	case pv.Spec.CSI != nil:
		if l, err := volumeid.ParseLegacy(pv.Spec.CSI.VolumeHandle); err == nil {
			e, _ := export.New(l.Export.Server, "/")
			return e, path.Join(l.Export.Share, l.SubDir), true
		}
		if id, err := volumeid.Parse(pv.Spec.CSI.VolumeHandle); err == nil {
			// An nfsdir PV: its directory is in its attributes.
			sub := strings.Trim(pv.Spec.CSI.VolumeAttributes["subDir"], "/")
			if sub == "" {
				return export.Export{}, "", false
			}
			at := id.Export
			if id.Name != "" {
				// A named export's: where it was made, in its attributes.
				at = export.Export{Server: pv.Spec.CSI.VolumeAttributes["server"], Share: pv.Spec.CSI.VolumeAttributes["share"]}
			}
			e, err := export.New(at.Server, "/")
			if err != nil || at.Share == "" {
				return export.Export{}, "", false
			}
			return e, path.Join(at.Share, sub), true
		}
	}
	return export.Export{}, "", false
}

func sourceKind(pv *corev1.PersistentVolume) string {
	switch {
	case pv.Spec.NFS != nil:
		return "nfs " + pv.Spec.NFS.Server + ":" + pv.Spec.NFS.Path
	case pv.Spec.CSI != nil:
		return fmt.Sprintf("CSI %s handle %q", pv.Spec.CSI.Driver, pv.Spec.CSI.VolumeHandle)
	}
	return "not NFS"
}

// knownShares returns the shares of nfsdir's StorageClasses.
func knownShares(in Input) []Share {
	var out []Share
	for _, sc := range in.Classes {
		if sc.Provisioner != in.Driver {
			continue
		}
		var server, share string
		for k, v := range sc.Parameters {
			switch strings.ToLower(k) {
			case "server":
				server = v
			case "share":
				share = v
			}
		}
		e, err := export.New(server, share)
		if err != nil {
			continue
		}
		out = append(out, Share{Export: e, MountOptions: sc.MountOptions, Class: sc.Name})
	}
	// The deepest share first: a directory belongs to the innermost
	// share that holds it.
	slices.SortStableFunc(out, func(a, b Share) int { return cmp.Compare(len(b.Export.Share), len(a.Export.Share)) })
	return out
}

// locate finds the known share that holds dir on server e and the path
// below it, or says why there is none.
func locate(shares []Share, e export.Export, dir string) (Share, string, string) {
	onServer := false
	for _, s := range shares {
		if s.Export.Server != e.Server {
			continue
		}
		onServer = true
		rel, ok := below(s.Export.Share, dir)
		if !ok {
			continue
		}
		if rel == "" {
			return Share{}, "", fmt.Sprintf("its directory %s is the whole share of StorageClass %s; nfsdir adopts directories below a share", e.Source(dir), s.Class)
		}
		if err := safepath.CheckVolumePath(rel); err != nil {
			return Share{}, "", fmt.Sprintf("its directory %q on share %s %v", rel, s.Export, err)
		}
		return s, rel, ""
	}
	if !onServer {
		return Share{}, "", fmt.Sprintf("server %s is not the server of any nfsdir StorageClass; add one for its share first", e.Server)
	}
	return Share{}, "", fmt.Sprintf("its directory %s is outside every share of nfsdir's StorageClasses on %s", dir, e.Server)
}

// below returns dir relative to share when dir is share or inside it.
func below(share, dir string) (string, bool) {
	if share == "/" {
		return strings.TrimPrefix(dir, "/"), true
	}
	if dir == share {
		return "", true
	}
	rel, ok := strings.CutPrefix(dir, share+"/")
	return rel, ok
}

// checkBinding says why pv is not safely bound to its claim, or "".
func checkBinding(pv *corev1.PersistentVolume, claims map[string]*corev1.PersistentVolumeClaim) string {
	ref := pv.Spec.ClaimRef
	if ref == nil || pv.Status.Phase != corev1.VolumeBound {
		return fmt.Sprintf("it is not bound to a claim (phase %s); only bound PVs are migrated", cmp.Or(string(pv.Status.Phase), "unknown"))
	}
	c := claims[ref.Namespace+"/"+ref.Name]
	switch {
	case c == nil:
		return fmt.Sprintf("its claim %s/%s does not exist", ref.Namespace, ref.Name)
	case c.UID != ref.UID:
		return fmt.Sprintf("its claim %s/%s is another object than the one it was bound to (UID %s, bound to %s)", ref.Namespace, ref.Name, c.UID, ref.UID)
	case c.Spec.VolumeName != pv.Name:
		return fmt.Sprintf("its claim %s/%s names volume %q", ref.Namespace, ref.Name, c.Spec.VolumeName)
	case c.DeletionTimestamp != nil:
		return fmt.Sprintf("its claim %s/%s is being deleted", ref.Namespace, ref.Name)
	case pv.DeletionTimestamp != nil:
		return "it is being deleted"
	case pv.Spec.VolumeMode != nil && *pv.Spec.VolumeMode == corev1.PersistentVolumeBlock:
		return "it is a block volume"
	}
	return ""
}

// sharedWith says which other PV uses dir on e, or holds it, or lies
// inside it; "" when none.
//
// A PV of a whole nfsdir share is no other volume's owner: it sees every
// volume of the share, nfsdir's own ones too, and migrating one changes
// nothing for it.
func sharedWith(places []place, shares []Share, name string, e export.Export, dir string) string {
	var why []string
	for _, p := range places {
		if p.pv == name || p.e.Server != e.Server {
			continue
		}
		if p.dir != dir && slices.ContainsFunc(shares, func(s Share) bool { return s.Export.Server == e.Server && s.Export.Share == p.dir }) {
			continue
		}
		switch rel, in := below(dir, p.dir); {
		case p.dir == dir:
			why = append(why, fmt.Sprintf("PV %s uses the same directory", p.pv))
		case in && rel != "":
			why = append(why, fmt.Sprintf("PV %s's directory lies inside it", p.pv))
		default:
			if _, out := below(p.dir, dir); out {
				why = append(why, fmt.Sprintf("it lies inside PV %s's directory", p.pv))
			}
		}
	}
	if len(why) == 0 {
		return ""
	}
	return fmt.Sprintf("its directory %s is not its own: %s; one directory per volume is what nfsdir records", e.Source(dir), strings.Join(why, "; "))
}

// place is where one PV's directory is.
type place struct {
	e   export.Export
	dir string
	pv  string
}

// onDeleteOf maps the incumbent's policy for pv to nfsdir's.
func onDeleteOf(pv *corev1.PersistentVolume, classes map[string]*storagev1.StorageClass) params.OnDelete {
	if pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete {
		return params.Retain
	}
	if pv.Spec.CSI != nil {
		l, _ := volumeid.ParseLegacy(pv.Spec.CSI.VolumeHandle)
		if p, err := params.ParseOnDelete(cmp.Or(l.OnDelete, "delete")); err == nil {
			return p
		}
		return params.Retain
	}
	// nfs-subdir-external-provisioner: onDelete wins over
	// archiveOnDelete, which is true unless it says false. An unknown
	// class (deleted since) keeps the data: archive.
	sc := classes[pv.Spec.StorageClassName]
	if sc == nil {
		return params.Archive
	}
	if v, ok := sc.Parameters[nfsSubdirOnDelete]; ok {
		switch strings.ToLower(v) {
		case "delete":
			return params.Delete
		case "retain":
			return params.Retain
		}
	}
	if strings.EqualFold(sc.Parameters[nfsSubdirArchiveOn], "false") {
		return params.Delete
	}
	return params.Archive
}
