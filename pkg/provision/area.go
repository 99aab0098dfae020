package provision

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/nfsdir/nfsdir/pkg/nfsmount"
	"github.com/nfsdir/nfsdir/pkg/safepath"
)

// Area is a share's managed directory tree opened for provisioning: the
// share root and its metadata area. It keeps the records directory open so
// that a record costs one round trip to the server. Create it with OpenArea;
// it is safe for concurrent use.
type Area struct {
	root    *os.Root
	volumes *os.Root
}

// ErrNoArea is returned by OpenArea without create when the share has no
// metadata area: nfsdir never created a volume there.
var ErrNoArea = errors.New("the share has no nfsdir metadata area")

// OpenArea opens the metadata area below root, creating it when missing if
// create is set; otherwise a missing area is ErrNoArea, and nothing is
// written to the share. root stays owned by the caller and must outlive
// the Area.
func OpenArea(root *os.Root, create bool) (*Area, error) {
	if create {
		for _, d := range []string{safepath.MetaDir, volumesDir, parentsDir, trashDir} {
			if _, err := mkdirOnce(root, d, 0o700); err != nil {
				return nil, onShare(err, "create nfsdir's metadata area %s", d)
			}
		}
	}
	volumes, err := root.OpenRoot(volumesDir)
	if errors.Is(err, fs.ErrNotExist) && !create {
		return nil, ErrNoArea
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", volumesDir, err)
	}
	return &Area{root: root, volumes: volumes}, nil
}

// Close releases the Area's own handles (not the share root).
func (a *Area) Close() error { return a.volumes.Close() }

// IsStale reports whether err means the Area's handles went stale (the
// server re-exported, or the metadata area was removed behind nfsdir's back)
// and the Area must be opened again.
func IsStale(err error) bool {
	return nfsmount.IsStale(err) || errors.Is(err, os.ErrClosed)
}
