// Package params turns StorageClass parameters (CreateVolume) and volume
// attributes (NodePublishVolume) into typed values. Keys are matched without
// regard to case and are the same as kubernetes-csi/csi-driver-nfs's, so a
// StorageClass can move over unchanged; an unknown key is an error that names
// it.
package params

import (
	"cmp"
	"fmt"
	"math"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/nfsdir/nfsdir/pkg/export"
	"github.com/nfsdir/nfsdir/pkg/gidrange"
	"github.com/nfsdir/nfsdir/pkg/mountopts"
	"github.com/nfsdir/nfsdir/pkg/safepath"
	"github.com/nfsdir/nfsdir/pkg/subdir"
)

// Parameter and attribute keys, lower case.
const (
	KeyServer           = "server"
	KeyShare            = "share"
	KeySubDir           = "subdir"
	KeyMountPermissions = "mountpermissions"
	KeyOnDelete         = "ondelete"
	KeyUID              = "uid"
	KeyGID              = "gid"
	KeyMountOptions     = "mountoptions"
	KeyMountServer      = "mountserver"
	KeyAllowShared      = "allowsharedsubdir"
	KeyQuotaAgent       = "quotaagent"
	KeyCopyAgent        = "copyagent"
	KeyKeepSetID        = "keepsetidonrestore"
	KeyStrictOptions    = "strictmountoptions"
	KeyGIDRangeStart    = "gidrangestart"
	KeyGIDRangeEnd      = "gidrangeend"
	KeyReuseDirectory   = "reusedirectory"
	KeyExport           = "export"
	KeyDrainExports     = "drainexports"
	KeyFillThreshold    = "fillthreshold"
	KeyPVCName          = "csi.storage.k8s.io/pvc/name"
	KeyPVCNamespace     = "csi.storage.k8s.io/pvc/namespace"
	KeyPVName           = "csi.storage.k8s.io/pv/name"
)

// spelling is how the documentation spells the keys whose lower case
// differs.
var spelling = map[string]string{KeySubDir: "subDir", KeyMountPermissions: "mountPermissions", KeyOnDelete: "onDelete",
	KeyMountOptions: "mountOptions", KeyMountServer: "mountServer", KeyAllowShared: "allowSharedSubDir", KeyQuotaAgent: "quotaAgent",
	KeyCopyAgent: "copyAgent", KeyKeepSetID: "keepSetIDOnRestore", KeyStrictOptions: "strictMountOptions",
	KeyGIDRangeStart: "gidRangeStart", KeyGIDRangeEnd: "gidRangeEnd", KeyReuseDirectory: "reuseDirectory",
	KeyDrainExports: "drainExports", KeyFillThreshold: "fillThreshold"}

// The keys StorageClass parameters (createKeys) and volume attributes
// (volumeKeys) may use.
var (
	createKeys = []string{KeyServer, KeyShare, KeyExport, KeyDrainExports, KeyFillThreshold, KeySubDir, KeyMountPermissions, KeyOnDelete,
		KeyUID, KeyGID, KeyAllowShared, KeyQuotaAgent, KeyCopyAgent, KeyKeepSetID, KeyStrictOptions, KeyGIDRangeStart, KeyGIDRangeEnd, KeyReuseDirectory, KeyPVCName, KeyPVCNamespace, KeyPVName}
	volumeKeys = []string{KeyServer, KeyShare, KeyExport, KeySubDir, KeyMountOptions,
		KeyMountPermissions, KeyOnDelete, KeyUID, KeyGID, KeyStrictOptions}
)

// Spell is key as the documentation spells it.
func Spell(key string) string { return cmp.Or(spelling[key], key) }

// Documented returns the keys operators set, as the documentation spells
// them, for each kind of object: "StorageClass" parameters, "volume"
// attributes (static and inline volumes) and "VolumeAttributesClass"
// parameters. Keys Kubernetes components add themselves are left out.
func Documented() map[string][]string {
	spell := func(keys []string) []string {
		var out []string
		for _, k := range keys {
			if !strings.Contains(k, "/") {
				out = append(out, cmp.Or(spelling[k], k))
			}
		}
		return out
	}
	return map[string][]string{"StorageClass": spell(createKeys), "volume": spell(volumeKeys), "VolumeAttributesClass": spell(mutableKeys)}
}

// kubernetesPrefixes start the keys Kubernetes components add on their own:
// csi.storage.k8s.io/ (kubelet's pod info and ephemeral flag, the
// provisioner's PVC/PV metadata) and storage.kubernetes.io/ (the
// provisioner's csiProvisionerIdentity in every PV it creates). They are
// accepted and ignored.
var kubernetesPrefixes = []string{"csi.storage.k8s.io/", "storage.kubernetes.io/"}

// OnDelete is what DeleteVolume does with a volume's directory.
type OnDelete string

// The onDelete policies.
const (
	Delete  OnDelete = "delete"  // remove the directory and its contents
	Retain  OnDelete = "retain"  // leave the directory as it is
	Archive OnDelete = "archive" // rename it to archived-<subDir>
)

// ParseOnDelete parses a policy name, ignoring case.
func ParseOnDelete(s string) (OnDelete, error) {
	switch p := OnDelete(strings.ToLower(strings.TrimSpace(s))); p {
	case Delete, Retain, Archive:
		return p, nil
	}
	return "", fmt.Errorf("onDelete %q is not one of delete, retain, archive", s)
}

// Create holds the parameters of a CreateVolume call.
type Create struct {
	// Export is the share's server and path; zero when the class names
	// its export (ExportName) or exports (Placement.Pool), which the
	// caller looks up.
	Export     export.Export
	ExportName string
	// Placement is where the class's volumes may go: the exports it
	// names, those drained, the fill threshold.
	Placement Placement
	SubDir    string      // resolved volume path relative to the share
	Mode      uint32      // permission bits for the new directory (0 = driver default)
	OnDelete  OnDelete    // "" = driver default
	UID, GID  int         // owner of the new directory; -1 = unchanged
	Vars      subdir.Vars // the claim's names, as passed by csi-provisioner
	// Shared lets several volumes use one directory (allowSharedSubDir).
	// Only valid with onDelete retain: deleting one volume must not delete
	// the others' data.
	Shared bool
	// QuotaAgent is the host:port of the quota agent that enforces the
	// volume's size on the server (quotaAgent); "": none.
	QuotaAgent string
	// CopyAgent is the host:port of the agent that copies the volume's
	// trees on the server (copyAgent); "": the controller copies.
	CopyAgent string
	// KeepSetID keeps the setuid and setgid bits of the files a restore
	// from a csi-driver-nfs archive writes (keepSetIDOnRestore); by
	// default they are cleared.
	KeepSetID bool
	// StrictOptions makes a publish whose mount got other options than it
	// asked for (strictMountOptions) an error; it goes to the node in the
	// volume's attributes.
	StrictOptions bool
	// GIDRange gives each new volume a GID of its own from the range
	// (gidRangeStart, gidRangeEnd), its directory's group, setgid.
	GIDRange gidrange.Range
	// Reuse lets a new volume take over the directory an earlier volume
	// of the same claim left (reuseDirectory): a cluster rebuilt, its
	// claims made again. Provisioning checks that the directory's record
	// names this claim and this cluster and that the earlier volume is
	// gone.
	Reuse bool
}

// NeedsClaim reports whether the subDir template of StorageClass
// parameters p uses the claim's labels or annotations: the caller reads
// them and passes them to ParseCreate.
func NeedsClaim(p map[string]string) bool {
	for k, v := range p {
		if strings.EqualFold(k, KeySubDir) && subdir.NeedsClaim(v) {
			return true
		}
	}
	return false
}

// ParseCreate parses StorageClass parameters. The subDir template is
// expanded with the claim's names from the parameters themselves and,
// when the template needs them (NeedsClaim), the claim's labels and
// annotations.
func ParseCreate(p map[string]string, claim *subdir.Claim) (Create, error) {
	m, err := lower(p, "parameter", createKeys...)
	if err != nil {
		return Create{}, err
	}
	c := Create{UID: -1, GID: -1}
	if c.Export, c.Placement, err = placementOf(m); err != nil {
		return Create{}, err
	}
	if len(c.Placement.Pool) == 1 {
		c.ExportName = c.Placement.Pool[0]
	}
	c.Vars = subdir.Vars{PVCName: m[KeyPVCName], PVCNamespace: m[KeyPVCNamespace], PVName: m[KeyPVName], Claim: claim}
	if c.SubDir, err = subdir.Expand(m[KeySubDir], c.Vars); err != nil {
		return Create{}, fmt.Errorf("parameter \"subDir\": %v", err)
	}
	if v, ok := m[KeyMountPermissions]; ok {
		mode, err := strconv.ParseUint(v, 8, 32)
		if err != nil || mode > 0o7777 {
			return Create{}, fmt.Errorf("parameter \"mountPermissions\" %q must be an octal mode such as \"02770\"", v)
		}
		c.Mode = uint32(mode)
	}
	if v, ok := m[KeyOnDelete]; ok {
		if c.OnDelete, err = ParseOnDelete(v); err != nil {
			return Create{}, fmt.Errorf("parameter %v", err)
		}
	}
	if v, ok := m[KeyAllowShared]; ok {
		if c.Shared, err = strconv.ParseBool(v); err != nil {
			return Create{}, fmt.Errorf("parameter \"allowSharedSubDir\" %q must be true or false", v)
		}
		if c.Shared && c.OnDelete != "" && c.OnDelete != Retain {
			return Create{}, fmt.Errorf("parameter \"allowSharedSubDir\" requires onDelete: retain (deleting one volume would delete the data of the others)")
		}
	}
	if c.UID, err = parseID(m, KeyUID); err != nil {
		return Create{}, err
	}
	if c.GID, err = parseID(m, KeyGID); err != nil {
		return Create{}, err
	}
	if err := c.parseAgents(m); err != nil {
		return Create{}, err
	}
	if v, ok := m[KeyKeepSetID]; ok {
		if c.KeepSetID, err = strconv.ParseBool(v); err != nil {
			return Create{}, fmt.Errorf("parameter \"keepSetIDOnRestore\" %q must be true or false", v)
		}
	}
	if c.StrictOptions, err = parseBool(m, KeyStrictOptions, "parameter"); err != nil {
		return Create{}, err
	}
	if c.GIDRange, err = gidrange.Parse(m[KeyGIDRangeStart], m[KeyGIDRangeEnd]); err != nil {
		return Create{}, fmt.Errorf("parameters: %v", err)
	}
	if !c.GIDRange.None() && c.GID >= 0 {
		return Create{}, fmt.Errorf("parameters \"gid\" and \"gidRangeStart\"/\"gidRangeEnd\" exclude each other: a volume's group is either the class's or one of the range")
	}
	if c.Reuse, err = parseBool(m, KeyReuseDirectory, "parameter"); err != nil {
		return Create{}, err
	}
	if err := c.checkReuse(m[KeySubDir]); err != nil {
		return Create{}, err
	}
	if len(c.Placement.Pool) > 1 && c.Shared {
		return Create{}, fmt.Errorf("parameter \"allowSharedSubDir\" needs a class of one export: the volumes of a shared directory must all be on the export that holds it")
	}
	if !c.GIDRange.None() && c.Shared {
		return Create{}, fmt.Errorf("parameter \"gidRangeStart\" cannot give a GID of its own to a shared directory (allowSharedSubDir)")
	}
	return c, nil
}

// parseAgents reads the class's quotaAgent and copyAgent.
func (c *Create) parseAgents(m map[string]string) (err error) {
	if v, ok := m[KeyQuotaAgent]; ok {
		if c.QuotaAgent, err = ParseEndpoint(v); err != nil {
			return fmt.Errorf("parameter \"quotaAgent\" %v", err)
		}
		if c.Shared {
			return fmt.Errorf("parameter \"quotaAgent\" cannot limit a shared directory (allowSharedSubDir): its volumes would share one limit")
		}
	}
	if v, ok := m[KeyCopyAgent]; ok {
		if c.CopyAgent, err = ParseEndpoint(v); err != nil {
			return fmt.Errorf("parameter \"copyAgent\" %v", err)
		}
	}
	return nil
}

// Placement is where a StorageClass's new volumes may go.
type Placement struct {
	// Pool names the class's exports (parameter export: one name, or
	// several, a pool); nil for a class of server and share.
	Pool []string
	// Drain names the exports of Pool that take no new volumes
	// (drainExports).
	Drain []string
	// FillPercent: an export whose file system is this full or fuller
	// takes no new volumes (fillThreshold, 1-100); 0: no limit.
	FillPercent int
}

// Chooses reports whether placing a volume of the class reads its
// exports' file systems: a pool, a drained export or a fill threshold.
func (p Placement) Chooses() bool {
	return len(p.Pool) > 1 || len(p.Drain) > 0 || p.FillPercent > 0
}

// ParsePlacement reads where the volumes of a StorageClass with
// parameters p go: its server and share, or its exports, and the limits
// on them. Other keys are checked to be known and otherwise ignored.
func ParsePlacement(p map[string]string) (export.Export, Placement, error) {
	m, err := lower(p, "parameter", createKeys...)
	if err != nil {
		return export.Export{}, Placement{}, err
	}
	return placementOf(m)
}

func placementOf(m map[string]string) (export.Export, Placement, error) {
	var pl Placement
	names, named := m[KeyExport]
	_, server := m[KeyServer]
	_, share := m[KeyShare]
	var e export.Export
	var err error
	switch {
	case named && (server || share):
		return e, pl, fmt.Errorf("parameter \"export\" names the server and share: leave out \"server\" and \"share\"")
	case named:
		if pl.Pool, err = export.ParseList(names); err != nil {
			return e, pl, fmt.Errorf("parameter \"export\": %v", err)
		}
	default:
		if e, err = export.New(m[KeyServer], m[KeyShare]); err != nil {
			return e, pl, err
		}
	}
	if v, ok := m[KeyDrainExports]; ok && strings.TrimSpace(v) != "" {
		if !named {
			return e, pl, fmt.Errorf("parameter \"drainExports\" drains exports a class names with parameter \"export\"; this class names a server and share")
		}
		if pl.Drain, err = export.ParseList(v); err != nil {
			return e, pl, fmt.Errorf("parameter \"drainExports\": %v", err)
		}
		for _, d := range pl.Drain {
			if !slices.Contains(pl.Pool, d) {
				return e, pl, fmt.Errorf("parameter \"drainExports\" names %s, which parameter \"export\" (%s) does not", d, names)
			}
		}
	}
	if v, ok := m[KeyFillThreshold]; ok {
		n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), "%"))
		if err != nil || n < 1 || n > 100 {
			return e, pl, fmt.Errorf("parameter \"fillThreshold\" %q must be a percentage from 1 to 100", v)
		}
		pl.FillPercent = n
	}
	return e, pl, nil
}

// exportOf reads where a volume is: a named export, or a server and
// share (or, in volume attributes, both: the address the name had when
// the volume was made).
func exportOf(m map[string]string) (export.Export, string, error) {
	name, named := m[KeyExport]
	if !named {
		e, err := export.New(m[KeyServer], m[KeyShare])
		return e, "", err
	}
	if err := export.CheckName(name); err != nil {
		return export.Export{}, "", fmt.Errorf("parameter \"export\": %v", err)
	}
	if m[KeyServer] == "" && m[KeyShare] == "" {
		return export.Export{}, name, nil
	}
	e, err := export.New(m[KeyServer], m[KeyShare])
	return e, name, err
}

// checkReuse refuses reuseDirectory where it cannot work: a subDir
// template tmpl of the PV's name, a shared directory, a copy agent.
func (c Create) checkReuse(tmpl string) error {
	if !c.Reuse {
		return nil
	}
	switch {
	case subdir.NamesPV(tmpl):
		return fmt.Errorf("parameter \"reuseDirectory\" needs a subDir template that names the claim (such as ${pvc.metadata.namespace}/${pvc.metadata.name}): a PV's name, the default subDir, is new for every volume, so no directory would ever be reused")
	case c.Shared:
		return fmt.Errorf("parameter \"reuseDirectory\" does not apply to shared directories (allowSharedSubDir): their volumes join them already")
	case c.CopyAgent != "":
		return fmt.Errorf("parameter \"reuseDirectory\" cannot be used with \"copyAgent\": the agent makes the volume on the server, where the Kubernetes API that proves the earlier volume gone is not reached")
	}
	return nil
}

// ParseEndpoint checks a host:port (a name, an IPv4 address or a
// bracketed IPv6 address, and a port 1-65535) and returns it.
func ParseEndpoint(v string) (string, error) {
	host, port, err := net.SplitHostPort(v)
	if err != nil || host == "" {
		return "", fmt.Errorf("%q must be host:port", v)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("%q: port %q must be 1-65535", v, port)
	}
	if _, err := export.New(host, "/"); err != nil {
		return "", fmt.Errorf("%q: host %v", v, err)
	}
	return v, nil
}

// parseBool parses the boolean m[key], false when it is not there.
func parseBool(m map[string]string, key, what string) (bool, error) {
	v, ok := m[key]
	if !ok {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%s %q %q must be true or false", what, cmp.Or(spelling[key], key), v)
	}
	return b, nil
}

func parseID(m map[string]string, key string) (int, error) {
	v, ok := m[key]
	if !ok {
		return -1, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt32 {
		return 0, fmt.Errorf("parameter %q %q must be a number from 0 to %d", key, v, math.MaxInt32)
	}
	return int(n), nil
}

// Volume holds what the node needs to mount a volume: from the volume
// context of a provisioned volume, or the attributes of a static PV or an
// inline volume.
type Volume struct {
	Export export.Export
	// ExportName names the export the volume is on: the node looks up
	// where it is now, and uses Export (the address when the volume was
	// made; zero when the attributes hold only the name) only when its
	// configuration does not hold the name.
	ExportName   string
	SubDir       string // "" mounts the share itself (static volumes only)
	MountOptions mountopts.Options
	// Ephemeral is kubelet's mark of a CSI inline volume: a pod author,
	// not a cluster administrator, chose its attributes.
	Ephemeral bool
	// StrictOptions: a mount that got other options than it asked for is
	// an error (strictMountOptions).
	StrictOptions bool
}

// KeyEphemeral is the attribute kubelet sets to "true" on CSI inline
// volumes (with podInfoOnMount).
const KeyEphemeral = "csi.storage.k8s.io/ephemeral"

// ParseVolume parses volume attributes. Keys of csi-driver-nfs that matter
// only to its controller (mountPermissions, onDelete, uid, gid) are accepted
// and ignored; keys kubelet adds (csi.storage.k8s.io/...) too.
func ParseVolume(attrs map[string]string) (Volume, error) {
	m, err := lower(attrs, "volume attribute", volumeKeys...)
	if err != nil {
		return Volume{}, err
	}
	var v Volume
	if v.Export, v.ExportName, err = exportOf(m); err != nil {
		return Volume{}, fmt.Errorf("volume attributes: %v", err)
	}
	v.SubDir = strings.Trim(m[KeySubDir], "/")
	if v.SubDir != "" {
		if subdir.IsTemplate(v.SubDir) {
			return Volume{}, fmt.Errorf("volume attribute \"subDir\" %q holds a template; templates are expanded only by CreateVolume", v.SubDir)
		}
		if err := safepath.CheckStaticPath(v.SubDir); err != nil {
			return Volume{}, fmt.Errorf("volume attribute \"subDir\" %v", err)
		}
	}
	if v.MountOptions, err = mountopts.Parse(m[KeyMountOptions]); err != nil {
		return Volume{}, fmt.Errorf("volume attribute \"mountOptions\": %v", err)
	}
	v.Ephemeral = attrs[KeyEphemeral] == "true"
	if v.StrictOptions, err = parseBool(m, KeyStrictOptions, "volume attribute"); err != nil {
		return Volume{}, err
	}
	return v, nil
}

// lower returns p with lower-case keys, failing on a key not in known
// (keys of kubernetesPrefixes aside) and on keys given twice in
// different case.
func lower(p map[string]string, what string, known ...string) (map[string]string, error) {
	ok := map[string]bool{}
	var names []string // as operators spell them, for the message
	for _, k := range known {
		ok[k] = true
		if !strings.Contains(k, "/") {
			names = append(names, cmp.Or(spelling[k], k))
		}
	}
	out := make(map[string]string, len(p))
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		lk := strings.ToLower(k)
		if !ok[lk] {
			if slices.ContainsFunc(kubernetesPrefixes, func(pre string) bool { return strings.HasPrefix(lk, pre) }) {
				continue
			}
			return nil, fmt.Errorf("unknown %s %q; known: %s", what, k, strings.Join(names, ", "))
		}
		if _, dup := out[lk]; dup {
			return nil, fmt.Errorf("%s %q is given twice (keys are case-insensitive)", what, k)
		}
		out[lk] = p[k]
	}
	return out, nil
}
