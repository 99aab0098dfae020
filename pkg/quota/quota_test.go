package quota

import (
	"errors"
	"testing"
	"unsafe"
)

// The structures must have the kernel's layout.
func TestABISizes(t *testing.T) {
	if s := unsafe.Sizeof(fsxattr{}); s != 28 {
		t.Errorf("fsxattr is %d bytes, the kernel's 28", s)
	}
	if s := unsafe.Sizeof(dqblk{}); s != 72 {
		t.Errorf("if_dqblk is %d bytes, the kernel's 72", s)
	}
}

// A file system without project quotas (procfs) is told apart from
// other failures.
func TestOpenWithoutProjectQuotas(t *testing.T) {
	_, err := Open("/proc")
	if !errors.Is(err, ErrNoProjectQuota) {
		t.Errorf("Open(/proc) = %v, want ErrNoProjectQuota", err)
	}
	if _, err := Open("/nonexistent"); err == nil || errors.Is(err, ErrNoProjectQuota) {
		t.Errorf("Open of a missing directory = %v", err)
	}
}
