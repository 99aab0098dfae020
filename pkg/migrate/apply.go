package migrate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
)

// API is what Apply and Rollback need from the Kubernetes API
// (kubeapi.Client). PV and ConfigMap return nil, nil for an object that
// does not exist.
type API interface {
	PV(ctx context.Context, name string) (*corev1.PersistentVolume, error)
	CreatePV(ctx context.Context, pv *corev1.PersistentVolume) error
	PatchPV(ctx context.Context, name string, patch []byte) error
	DeletePV(ctx context.Context, name string, uid types.UID) error
	ClaimObject(ctx context.Context, namespace, name string) (*corev1.PersistentVolumeClaim, error)
	ConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error)
	ConfigMaps(ctx context.Context, namespace, selector string) ([]corev1.ConfigMap, error)
	CreateConfigMap(ctx context.Context, cm *corev1.ConfigMap) error
	DeleteConfigMap(ctx context.Context, namespace, name string) error
}

// Shares adopts and releases volume directories on their shares.
type Shares interface {
	// Check returns the error Adopt would give for it, changing nothing.
	Check(ctx context.Context, it Item) error
	// Adopt records it's directory as an nfsdir volume named it.PV (the
	// same adoption again returns the same volume) and returns the
	// volume ID and the volume attributes of an nfsdir PV for it.
	Adopt(ctx context.Context, it Item) (id string, attrs map[string]string, err error)
	// Release removes the record Adopt made, leaving the directory and
	// everything in it as it is.
	Release(ctx context.Context, it Item) error
}

// Options tune Apply and Rollback.
type Options struct {
	// Namespace holds the saved PVs (ConfigMaps nfsdir-migrate-<hash>),
	// which Rollback restores and a resumed Apply continues from.
	Namespace string
	// Driver is nfsdir's driver name.
	Driver string
	// Wait bounds each wait for the API server: a PV gone, a claim bound.
	Wait time.Duration
	// Log gets one line per step.
	Log io.Writer
	// DryRun has Rollback say what it would do, and do nothing.
	DryRun bool
}

// Keys of a saved PV's ConfigMap.
const (
	keyPV   = "pv.json"
	keyItem = "item.json"
)

// Result is how one PV's migration or rollback ended.
type Result struct {
	PV  string
	Err error
}

type runner struct {
	kube API
	sh   Shares
	o    Options
}

func (r runner) logf(format string, args ...any) {
	if r.o.Log != nil {
		fmt.Fprintf(r.o.Log, format+"\n", args...)
	}
}

// Apply carries out the Keep and Replace items of plan, one PV after the
// other, and returns one Result per item it acted on. Each step looks at
// the objects first, so an interrupted Apply is resumed by running it
// again, and a finished one does nothing.
//
// For each PV: its object is saved (once: the first save is the original),
// its reclaim policy set to Retain so that no deletion of the PV object can
// touch the data, and its directory adopted. Keep then restores the PV's
// reclaim policy: deleting the claim follows the adopted record. Replace
// deletes the old PV object (finalizers removed: it is bound) and creates
// an nfsdir PV of the same name, capacity, access modes, mount options,
// class and claim reference, which the claim, whose name and UID do not
// change, binds to again. Running pods keep their mounts; new mounts use
// the nfsdir PV.
func Apply(ctx context.Context, kube API, sh Shares, plan Plan, o Options) []Result {
	r := runner{kube, sh, o}
	var out []Result
	for _, it := range plan.Items {
		if it.Action != Keep && it.Action != Replace {
			continue
		}
		err := r.apply(ctx, plan.From, it)
		if err != nil {
			r.logf("%s: %v", it.PV, err)
		}
		out = append(out, Result{PV: it.PV, Err: err})
	}
	return out
}

func (r runner) apply(ctx context.Context, from string, it Item) error {
	saved, digest, err := r.save(ctx, from, it)
	if err != nil {
		return err
	}
	pv, err := r.getPV(ctx, it.PV)
	if err != nil {
		return err
	}
	old := pv != nil && pv.UID == saved.UID
	if old && (pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimRetain || pv.Annotations[AnnSaved] != digest) {
		patch := map[string]any{
			"metadata": map[string]any{"annotations": map[string]string{AnnSaved: digest}},
			"spec":     map[string]any{"persistentVolumeReclaimPolicy": corev1.PersistentVolumeReclaimRetain},
		}
		b, _ := json.Marshal(patch)
		if err := r.patchPV(ctx, pv, string(b)); err != nil {
			return fmt.Errorf("set reclaim policy Retain: %w", err)
		}
		r.logf("%s: reclaim policy Retain", it.PV)
	}
	id, attrs, err := r.sh.Adopt(ctx, it)
	if err != nil {
		return fmt.Errorf("adopt %s: %w", it.Share.Export.Source(it.SubDir), err)
	}
	r.logf("%s: directory %s adopted as %s (onDelete=%s)", it.PV, it.Share.Export.Source(it.SubDir), it.PV, it.OnDelete)
	if it.Action == Keep {
		if pv == nil || !old {
			return fmt.Errorf("PV %s is gone or another object than the one saved; nothing to keep", it.PV)
		}
		patch := map[string]any{
			"metadata": map[string]any{"annotations": map[string]string{AnnMigratedFrom: from}},
			"spec":     map[string]any{"persistentVolumeReclaimPolicy": saved.Spec.PersistentVolumeReclaimPolicy},
		}
		b, _ := json.Marshal(patch)
		if err := r.patchPV(ctx, pv, string(b)); err != nil {
			return fmt.Errorf("restore reclaim policy: %w", err)
		}
		r.logf("%s: kept, reclaim policy %s, deleting its claim now follows onDelete=%s", it.PV, saved.Spec.PersistentVolumeReclaimPolicy, it.OnDelete)
		return nil
	}
	if old {
		if err := r.deletePV(ctx, pv); err != nil {
			return err
		}
	} else if pv != nil {
		if pv.Annotations[AnnMigratedFrom] != from || pv.Spec.CSI == nil || pv.Spec.CSI.VolumeHandle != id {
			return fmt.Errorf("PV %s is another object than the one saved, and not the nfsdir PV for it; left alone", it.PV)
		}
		return r.waitBound(ctx, it.PV, saved)
	}
	np := replacement(saved, from, r.o.Driver, id, attrs)
	np.Annotations[AnnSaved] = digest
	if err := r.kube.CreatePV(ctx, np); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create the nfsdir PV: %w (the old one is saved in ConfigMap %s/%s; rerun to retry, or --rollback)", err, r.o.Namespace, savedName(it.PV))
	}
	r.logf("%s: nfsdir PV created with handle %s", it.PV, id)
	return r.waitBound(ctx, it.PV, saved)
}

// Vet asks the shares whether each Keep and Replace item of plan can be
// adopted, and refuses, with the reason, those that cannot (a directory
// missing, nfsdir's already, holding or inside an nfsdir volume).
func Vet(ctx context.Context, plan Plan, sh Shares) Plan {
	for i, it := range plan.Items {
		if it.Action != Keep && it.Action != Replace {
			continue
		}
		if err := sh.Check(ctx, it); err != nil {
			plan.Items[i].Action, plan.Items[i].Reason = Refuse, "its directory cannot be adopted: "+err.Error()
		}
	}
	return plan
}

// Saved returns the plan items kept with the saved PVs of cms, by PV name;
// a ConfigMap that holds none is left out.
func Saved(cms []corev1.ConfigMap) map[string]Item {
	out := map[string]Item{}
	for i := range cms {
		if pv, it, err := decodeSaved(&cms[i]); err == nil {
			out[pv.Name] = it
		}
	}
	return out
}

// replacement is the nfsdir PV that takes old's place.
func replacement(old *corev1.PersistentVolume, from, driver, id string, attrs map[string]string) *corev1.PersistentVolume {
	ann := maps.Clone(old.Annotations)
	if ann == nil {
		ann = map[string]string{}
	}
	delete(ann, AnnProvisionedBy2)
	ann[AnnProvisionedBy] = driver
	ann[AnnMigratedFrom] = from
	ref := old.Spec.ClaimRef.DeepCopy()
	ref.ResourceVersion = ""
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: old.Name, Labels: old.Labels, Annotations: ann},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      old.Spec.Capacity,
			AccessModes:                   old.Spec.AccessModes,
			ClaimRef:                      ref,
			PersistentVolumeReclaimPolicy: old.Spec.PersistentVolumeReclaimPolicy,
			StorageClassName:              old.Spec.StorageClassName,
			MountOptions:                  old.Spec.MountOptions,
			VolumeMode:                    old.Spec.VolumeMode,
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: driver, VolumeHandle: id, VolumeAttributes: attrs}},
		},
	}
}

// Rollback restores the PVs saved by Apply whose names accept takes (all
// when nil) and releases their adopted directories. Like Apply, it can be
// run again after an interruption. A saved copy is restored only when the
// PV now in its place (the one Apply kept or made) carries its digest: a
// ConfigMap nfsdir did not write is refused, whoever could write it. With
// o.DryRun it says what it would do.
func Rollback(ctx context.Context, kube API, sh Shares, from string, accept func(pv string) bool, o Options) ([]Result, error) {
	r := runner{kube, sh, o}
	cms, err := kube.ConfigMaps(ctx, o.Namespace, LabelMigration+"="+from)
	if err != nil {
		return nil, fmt.Errorf("list saved PVs in namespace %s: %w", o.Namespace, err)
	}
	var out []Result
	for i := range cms {
		saved, it, err := decodeSaved(&cms[i])
		if err == nil && accept != nil && !accept(saved.Name) {
			continue
		}
		if err == nil {
			err = r.rollback(ctx, from, saved, it, digestOf(&cms[i]))
		}
		name := cms[i].Name
		if saved != nil {
			name = saved.Name
		}
		if err != nil {
			r.logf("%s: %v", name, err)
		}
		out = append(out, Result{PV: name, Err: err})
	}
	return out, nil
}

func (r runner) rollback(ctx context.Context, from string, saved *corev1.PersistentVolume, it Item, digest string) error {
	pv, err := r.getPV(ctx, saved.Name)
	if err != nil {
		return err
	}
	switch {
	case pv == nil:
		return fmt.Errorf("PV %s does not exist, so nothing vouches for its saved copy in ConfigMap %s/%s; finish the migration first (run it again with --apply), then roll back", saved.Name, r.o.Namespace, savedName(saved.Name))
	case pv.Annotations[AnnSaved] != digest:
		return fmt.Errorf("ConfigMap %s/%s is not the copy of PV %s that nfsdir saved (the PV's %s annotation does not match it); left alone", r.o.Namespace, savedName(saved.Name), saved.Name, AnnSaved)
	case r.o.DryRun:
		src := "its saved spec"
		if s := saved.Spec; s.CSI != nil {
			src = fmt.Sprintf("driver %s, handle %s", s.CSI.Driver, s.CSI.VolumeHandle)
		} else if s.NFS != nil {
			src = fmt.Sprintf("NFS %s:%s", s.NFS.Server, s.NFS.Path)
		}
		r.logf("%s: would restore the saved PV (%s, reclaim policy %s) and release %s", saved.Name, src, saved.Spec.PersistentVolumeReclaimPolicy, it.Share.Export.Source(it.SubDir))
		return nil
	case pv.UID == saved.UID:
		// Kept (drop-in), or not replaced yet: put the policy back.
		patch := map[string]any{
			"metadata": map[string]any{"annotations": map[string]any{AnnMigratedFrom: nil, AnnSaved: nil}},
			"spec":     map[string]any{"persistentVolumeReclaimPolicy": saved.Spec.PersistentVolumeReclaimPolicy},
		}
		b, _ := json.Marshal(patch)
		if err := r.patchPV(ctx, pv, string(b)); err != nil {
			return err
		}
	case pv.Annotations[AnnMigratedFrom] != from:
		return fmt.Errorf("PV %s is neither the saved one nor the nfsdir PV that replaced it; left alone", saved.Name)
	default:
		if pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimRetain {
			if err := r.patchPV(ctx, pv, `{"spec":{"persistentVolumeReclaimPolicy":"Retain"}}`); err != nil {
				return err
			}
		}
		if err := r.deletePV(ctx, pv); err != nil {
			return err
		}
		restored := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: saved.Name, Labels: saved.Labels, Annotations: saved.Annotations},
			Spec: *saved.Spec.DeepCopy()}
		restored.Spec.ClaimRef.ResourceVersion = ""
		if err := r.kube.CreatePV(ctx, restored); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("restore the saved PV: %w", err)
		}
		r.logf("%s: saved PV restored", saved.Name)
		if err := r.waitBound(ctx, saved.Name, saved); err != nil {
			return err
		}
	}
	if err := r.sh.Release(ctx, it); err != nil {
		return fmt.Errorf("release the adopted directory: %w", err)
	}
	if err := r.kube.DeleteConfigMap(ctx, r.o.Namespace, savedName(saved.Name)); err != nil {
		return err
	}
	r.logf("%s: rolled back", saved.Name)
	return nil
}

// savedName is the ConfigMap that holds PV name's saved object.
func savedName(pv string) string {
	h := sha256.Sum256([]byte(pv))
	return "nfsdir-migrate-" + hex.EncodeToString(h[:10])
}

// save keeps the PV of it in its ConfigMap, once, and returns the saved
// PV: the original, whatever happened to the live object since.
func (r runner) save(ctx context.Context, from string, it Item) (*corev1.PersistentVolume, string, error) {
	cm, err := r.kube.ConfigMap(ctx, r.o.Namespace, savedName(it.PV))
	if err != nil {
		return nil, "", err
	}
	pv, err := r.kube.PV(ctx, it.PV)
	if err != nil {
		return nil, "", fmt.Errorf("read PV %s: %w", it.PV, err)
	}
	var want *corev1.ConfigMap // the copy of the PV as it is, while it is
	if pv != nil {
		if want, err = savedCopy(pv, it, from, r.o.Namespace); err != nil {
			return nil, "", err
		}
	}
	if cm != nil {
		saved, _, err := decodeSaved(cm)
		if err == nil && saved.Name != it.PV {
			err = fmt.Errorf("ConfigMap %s/%s holds PV %s", r.o.Namespace, cm.Name, saved.Name)
		}
		// While the PV it saved is there, the copy must be the one that
		// PV vouches for (a resumed run) or, before it vouched for any,
		// the PV as it is: else nfsdir did not write it.
		if err == nil && want != nil && pv.UID == saved.UID {
			vouched := pv.Annotations[AnnSaved]
			if (vouched != "" && vouched != digestOf(cm)) || (vouched == "" && digestOf(cm) != digestOf(want)) {
				err = fmt.Errorf("ConfigMap %s/%s is not the copy of PV %s that nfsdir saved; delete it and run again", r.o.Namespace, cm.Name, it.PV)
			}
		}
		return saved, digestOf(cm), err
	}
	if want == nil {
		return nil, "", fmt.Errorf("read PV %s: it does not exist", it.PV)
	}
	if err := r.kube.CreateConfigMap(ctx, want); err != nil {
		return nil, "", fmt.Errorf("save PV in ConfigMap %s/%s: %w", r.o.Namespace, want.Name, err)
	}
	r.logf("%s: saved in ConfigMap %s/%s", it.PV, r.o.Namespace, want.Name)
	saved, _, err := decodeSaved(want)
	return saved, digestOf(want), err
}

// savedCopy is the ConfigMap that saves pv (without its status and
// server-side fields) and the plan's item for it.
func savedCopy(pv *corev1.PersistentVolume, it Item, from, ns string) (*corev1.ConfigMap, error) {
	keep := pv.DeepCopy()
	keep.ManagedFields, keep.ResourceVersion, keep.Status = nil, "", corev1.PersistentVolumeStatus{}
	delete(keep.Annotations, AnnSaved)
	pvJSON, err := json.Marshal(keep)
	if err != nil {
		return nil, err
	}
	itemJSON, err := json.Marshal(it)
	if err != nil {
		return nil, err
	}
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: savedName(it.PV), Namespace: ns,
			Labels:      map[string]string{LabelMigration: from},
			Annotations: map[string]string{"nfsdir.csi.io/pv": it.PV}},
		Data: map[string]string{keyPV: string(pvJSON), keyItem: string(itemJSON)},
	}, nil
}

// digestOf is the digest of a saved PV's ConfigMap: its two keys' data.
func digestOf(cm *corev1.ConfigMap) string {
	h := sha256.New()
	h.Write([]byte(cm.Data[keyPV]))
	h.Write([]byte{0})
	h.Write([]byte(cm.Data[keyItem]))
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

func decodeSaved(cm *corev1.ConfigMap) (*corev1.PersistentVolume, Item, error) {
	var pv corev1.PersistentVolume
	var it Item
	if err := json.Unmarshal([]byte(cm.Data[keyPV]), &pv); err != nil || pv.Name == "" || pv.Spec.ClaimRef == nil {
		return nil, it, fmt.Errorf("ConfigMap %s/%s does not hold a saved PV (%v)", cm.Namespace, cm.Name, err)
	}
	if err := json.Unmarshal([]byte(cm.Data[keyItem]), &it); err != nil || it.PV != pv.Name {
		return nil, it, fmt.Errorf("ConfigMap %s/%s does not hold the plan item of PV %s (%v)", cm.Namespace, cm.Name, pv.Name, err)
	}
	return &pv, it, nil
}

func (r runner) getPV(ctx context.Context, name string) (*corev1.PersistentVolume, error) {
	pv, err := r.kube.PV(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("read PV %s: %w", name, err)
	}
	return pv, nil
}

// patchPV applies a merge patch to pv, on the condition that it is still
// the same object.
func (r runner) patchPV(ctx context.Context, pv *corev1.PersistentVolume, patch string) error {
	return r.kube.PatchPV(ctx, pv.Name, []byte(patch))
}

// deletePV deletes the PV object pv (its finalizers removed: a bound PV's
// protection would hold it) and waits until it is gone. The data is safe:
// the PV's reclaim policy is Retain by now.
func (r runner) deletePV(ctx context.Context, pv *corev1.PersistentVolume) error {
	if pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimRetain {
		if cur, err := r.getPV(ctx, pv.Name); err != nil || cur == nil || cur.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimRetain {
			return fmt.Errorf("PV %s: reclaim policy is not Retain; not deleting it (%v)", pv.Name, err)
		}
	}
	uid := pv.UID
	if len(pv.Finalizers) > 0 {
		if err := r.patchPV(ctx, pv, `{"metadata":{"finalizers":null}}`); err != nil {
			return fmt.Errorf("remove the PV's finalizers: %w", err)
		}
	}
	if err := r.kube.DeletePV(ctx, pv.Name, uid); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete the old PV object: %w", err)
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, r.o.Wait, true, func(ctx context.Context) (bool, error) {
		cur, err := r.getPV(ctx, pv.Name)
		if err != nil || cur == nil || cur.UID != uid {
			return err == nil, err
		}
		if len(cur.Finalizers) > 0 { // a controller put one back
			return false, r.patchPV(ctx, cur, `{"metadata":{"finalizers":null}}`)
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("old PV object not gone: %w", err)
	}
	r.logf("%s: old PV object deleted (the directory untouched)", pv.Name)
	return nil
}

// waitBound waits until PV name and saved's claim are bound to each other.
func (r runner) waitBound(ctx context.Context, name string, saved *corev1.PersistentVolume) error {
	ref := saved.Spec.ClaimRef
	var last string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, r.o.Wait, true, func(ctx context.Context) (bool, error) {
		pv, err := r.getPV(ctx, name)
		if err != nil || pv == nil {
			last = "PV missing"
			return false, err
		}
		c, err := r.kube.ClaimObject(ctx, ref.Namespace, ref.Name)
		if err != nil {
			return false, err
		}
		last = fmt.Sprintf("PV %s, claim %s", pv.Status.Phase, c.Status.Phase)
		return pv.Status.Phase == corev1.VolumeBound && c.Status.Phase == corev1.ClaimBound && c.UID == ref.UID && c.Spec.VolumeName == name, nil
	})
	if err != nil {
		return fmt.Errorf("claim %s/%s and PV %s not bound (%s): %w", ref.Namespace, ref.Name, name, last, err)
	}
	r.logf("%s: bound to claim %s/%s", name, ref.Namespace, ref.Name)
	return nil
}
