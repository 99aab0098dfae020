package provision

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/nfsdir/nfsdir/pkg/treewalk/treeshapes"
)

// The purge over every hostile shape (treeshapes): each deleted volume
// leaves the trash whole, with a bounded number of descriptors open, and
// nothing its symlinks point at outside it is touched.
func TestPurgeOverHostileShapes(t *testing.T) {
	for i, shape := range treeshapes.All {
		t.Run(shape.Name, func(t *testing.T) {
			dir, a := newShare(t)
			outside := t.TempDir()
			outsideIntact, err := treeshapes.Outside(outside)
			if err != nil {
				t.Fatal(err)
			}
			entry := filepath.Join(dir, trashDir, fmt.Sprintf("shape%d.aaaaaaaa", i))
			if err := os.Mkdir(entry, 0o755); err != nil {
				t.Fatal(err)
			}
			if _, err := shape.Build(entry, outside); err != nil {
				t.Fatal(err)
			}
			extra, base := purgeFDs(dir, a, 2)
			if _, err := os.Lstat(entry); err == nil {
				t.Error("the volume is still in the trash")
			}
			if extra > 64 {
				t.Errorf("the purge held %d descriptors above the %d before", extra, base)
			}
			if err := outsideIntact(); err != nil {
				t.Error(err)
			}
		})
	}
}
