package params

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/nfsdir/nfsdir/pkg/export"
	"github.com/nfsdir/nfsdir/pkg/mountopts"
)

// Mutable holds the parameters a VolumeAttributesClass may set, at
// CreateVolume (mutable_parameters) or later (ControllerModifyVolume).
type Mutable struct {
	// OnDelete replaces the volume's policy; "" leaves it.
	OnDelete OnDelete
	// MountOptions replace the StorageClass's mount options at the
	// volume's next NodePublishVolume; set only when HasMountOptions (an
	// empty value then clears them: the node's defaults apply).
	MountOptions    mountopts.Options
	HasMountOptions bool
	// MountServer is another address of the volume's server (a name, an
	// IPv4 or an IPv6 address) that nodes mount the volume from, once the
	// controller has seen the volume's own directory through it; set only
	// when HasMountServer (an empty value then goes back to the volume's
	// own address).
	MountServer    string
	HasMountServer bool
}

// mutableKeys are the keys a VolumeAttributesClass may use.
var mutableKeys = []string{KeyOnDelete, KeyMountOptions, KeyMountServer}

// ParseMutable parses a VolumeAttributesClass's parameters. Keys are
// case-insensitive; any other key is refused with its name, and a key of
// the StorageClass that cannot change after creation says so.
func ParseMutable(p map[string]string) (Mutable, error) {
	var m Mutable
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	seen := map[string]bool{}
	for _, k := range keys {
		lk := strings.ToLower(k)
		switch {
		case seen[lk]:
			return Mutable{}, fmt.Errorf("parameter %q is given twice (keys are case-insensitive)", k)
		case slices.Contains([]string{KeyServer, KeyShare, KeySubDir, KeyMountPermissions, KeyUID, KeyGID, KeyAllowShared}, lk):
			return Mutable{}, fmt.Errorf("parameter %q cannot change after the volume is created; a VolumeAttributesClass may set only onDelete, mountOptions and mountServer", k)
		case !slices.Contains(mutableKeys, lk):
			return Mutable{}, fmt.Errorf("unknown parameter %q; a VolumeAttributesClass may set only onDelete, mountOptions and mountServer", k)
		}
		seen[lk] = true
		v := p[k]
		switch lk {
		case KeyOnDelete:
			pol, err := ParseOnDelete(v)
			if err != nil {
				return Mutable{}, fmt.Errorf("parameter %v", err)
			}
			m.OnDelete = pol
		case KeyMountOptions:
			opts, err := mountopts.Parse(v)
			if err != nil {
				return Mutable{}, fmt.Errorf("parameter \"mountOptions\": %v", err)
			}
			m.MountOptions, m.HasMountOptions = opts, true
		case KeyMountServer:
			if v != "" {
				e, err := export.New(v, "/")
				if err != nil {
					return Mutable{}, fmt.Errorf("parameter \"mountServer\": %v", err)
				}
				v = e.Server
			}
			m.MountServer, m.HasMountServer = v, true
		}
	}
	return m, nil
}
