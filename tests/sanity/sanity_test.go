package sanity

import "testing"

// TestSanity runs the suite once per process (Ginkgo allows no more): in the
// lab guest against the kernel NFS server and client, elsewhere with NFS
// replaced by local directories (nfsmounttest).
func TestSanity(t *testing.T) { Run(t, nil) }
