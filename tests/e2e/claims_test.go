package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nfsdir/nfsdir/pkg/publock"
	"github.com/nfsdir/nfsdir/tests/lab"
)

// claimOnServer returns the claim file of volume v as the server has it.
func claimOnServer(t *testing.T, v *csi.Volume) string {
	t.Helper()
	sub := v.GetVolumeContext()["subDir"]
	if sub == "" {
		t.Fatalf("volume context without subdir: %v", v.GetVolumeContext())
	}
	b, err := os.ReadFile(onExport(filepath.Join(".nfsdir", publock.Dir, publock.Name(sub))))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(b)
}

// twoNodes starts two node plugins as two machines would run them: a
// (controller and node lab-node) and b (node lab-node-2), each with its
// own state, with extra flags for both.
func twoNodes(t *testing.T, extra ...string) (a, b *lab.Process, ca, cb *lab.Client) {
	lab.Require(t)
	a = lab.StartBinary(t, "", extra...)
	b = lab.StartBinary(t, "", append([]string{"--mode=node", "--node-id=lab-node-2"}, extra...)...)
	return a, b, lab.Connect(t, a.Endpoint), lab.Connect(t, b.Endpoint)
}

// TestSingleNodeVolumeOnOneNodeAtATime: two node plugins (two processes
// with their own node IDs and state, as two machines would run them) on
// real NFS. A ReadWriteOnce volume published by one is refused to the
// other, FailedPrecondition naming the holder, with nothing mounted; a
// ReadWriteMany volume is published by both. The holder killed and
// restarted keeps its claim (renewed from its claims file past the lapse);
// killed for good, its claim lapses and the other node takes the volume,
// and the restarted first one logs that it lost it. The last unpublish
// frees the claim on the server.
func TestSingleNodeVolumeOnOneNodeAtATime(t *testing.T) {
	const lapse = 6 * time.Second
	a, _, ca, cb := twoNodes(t, "--claim-lapse="+lapse.String())

	rwo := lab.MountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER, "nfsvers=4.1")
	v := ca.Create(t, "pvc-claims-rwo", params(), rwo)
	ta, tb := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	ca.Publish(t, v, ta, rwo, false)
	ca.Publish(t, v, ta, rwo, false) // idempotent
	if c := claimOnServer(t, v); !strings.Contains(c, `"node":"lab-node"`) {
		t.Fatalf("claim on the server after the publish: %q", c)
	}
	refused := func(why string) {
		t.Helper()
		err := cb.TryPublish(lab.Ctx(t, time.Minute), v, tb, rwo, false)
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), `"lab-node"`) {
			t.Fatalf("%s: publish on the second node = %v, want FailedPrecondition naming lab-node", why, err)
		}
		if lab.MountInfo(t, tb) != "" {
			t.Fatalf("%s: the refused publish mounted %s", why, tb)
		}
	}
	refused("live claim")
	for _, mode := range []csi.VolumeCapability_AccessMode_Mode{csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY} {
		err := cb.TryPublish(lab.Ctx(t, time.Minute), v, tb, lab.MountCap(mode, "nfsvers=4.1"), mode == csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY)
		if status.Code(err) != codes.FailedPrecondition {
			t.Errorf("publish as %s on the second node = %v, want FailedPrecondition", mode, err)
		}
	}

	rwx := lab.RWX("nfsvers=4.1")
	w := ca.Create(t, "pvc-claims-rwx", params(), rwx)
	wa, wb := filepath.Join(t.TempDir(), "wa"), filepath.Join(t.TempDir(), "wb")
	ca.Publish(t, w, wa, rwx, false)
	cb.Publish(t, w, wb, rwx, false)
	if c := claimOnServer(t, w); c != "" {
		t.Errorf("a ReadWriteMany volume got a claim: %q", c)
	}

	// The first node's plugin killed and restarted: its mount stays, and
	// so does its claim, renewed from its claims file.
	a.Kill()
	refused("holder's plugin killed, within the lapse")
	if err := a.Restart(t); err != nil {
		t.Fatal(err)
	}
	time.Sleep(lapse + 2*time.Second)
	refused("holder's plugin restarted, past the lapse")

	// Killed for good (a dead node): the claim lapses and the second node
	// takes the volume.
	a.Kill()
	deadline := time.Now().Add(3 * lapse)
	for {
		err := cb.TryPublish(lab.Ctx(t, time.Minute), v, tb, rwo, false)
		if err == nil {
			break
		}
		if status.Code(err) != codes.FailedPrecondition || time.Now().After(deadline) {
			t.Fatalf("publish on the second node after the holder died: %v", err)
		}
		time.Sleep(time.Second)
	}
	if c := claimOnServer(t, v); !strings.Contains(c, `"node":"lab-node-2"`) {
		t.Fatalf("claim on the server after the takeover: %q", c)
	}
	if err := a.Restart(t); err != nil {
		t.Fatal(err)
	}
	for until := time.Now().Add(2 * lapse); ; time.Sleep(500 * time.Millisecond) {
		if log, _ := os.ReadFile(a.Log); strings.Contains(string(log), "LOST its claim") {
			break
		}
		if time.Now().After(until) {
			t.Fatal("the restarted first node did not log the claim it lost")
		}
	}
	cb.Unpublish(t, v, tb)
	if c := claimOnServer(t, v); c != "" {
		t.Errorf("claim on the server after the last unpublish: %q", c)
	}
	// The first node's left-over mount: unpublished, the claim it no
	// longer holds stays free, and the second node publishes again.
	ca.Unpublish(t, v, ta)
	cb.Publish(t, v, tb, rwo, false)
	cb.Unpublish(t, v, tb)
	ca.Unpublish(t, w, wa)
	cb.Unpublish(t, w, wb)
	ca.Delete(t, v)
	ca.Delete(t, w)
}

// TestSingleNodeVolumeOnNFSv3: the claims of a share mounted with NFSv3
// are locked through lockd as well, and refuse a second node.
func TestSingleNodeVolumeOnNFSv3(t *testing.T) {
	a, b, ca, cb := twoNodes(t)
	rwo := lab.MountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, "nfsvers=3")
	v := ca.Create(t, "pvc-claims-v3", params(), rwo)
	ta, tb := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	ca.Publish(t, v, ta, rwo, false)
	if line := lab.MountInfo(t, ta); !strings.Contains(line, "vers=3") {
		t.Fatalf("not an NFSv3 mount: %s", line)
	}
	err := cb.TryPublish(lab.Ctx(t, time.Minute), v, tb, rwo, false)
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("publish on the second node = %v, want FailedPrecondition", err)
	}
	for _, p := range []*lab.Process{a, b} {
		if log, _ := os.ReadFile(p.Log); strings.Contains(string(log), "cannot lock") {
			t.Errorf("claims taken without NFS locks: %s", log)
		}
	}
	ca.Unpublish(t, v, ta)
	cb.Publish(t, v, tb, rwo, false)
	cb.Unpublish(t, v, tb)
	ca.Delete(t, v)
}

// TestRestartedNodeDropsClaimsOfVanishedMounts: a node plugin restarted
// after its mount went away meanwhile (kubelet cleaned up, the machine
// rebooted) drops the claim at start-up, so another node gets the volume
// at once rather than after the lapse.
func TestRestartedNodeDropsClaimsOfVanishedMounts(t *testing.T) {
	const lapse = time.Minute
	a, _, ca, cb := twoNodes(t, "--claim-lapse="+lapse.String())
	rwo := lab.MountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER, "nfsvers=4.2")
	v := ca.Create(t, "pvc-claims-vanished", params(), rwo)
	ta, tb := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	ca.Publish(t, v, ta, rwo, false)
	a.Kill()
	lab.Sh(t, "umount "+ta)
	if err := cb.TryPublish(lab.Ctx(t, time.Minute), v, tb, rwo, false); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("publish on the second node while the claim is live = %v", err)
	}
	if err := a.Restart(t); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	for {
		err := cb.TryPublish(lab.Ctx(t, time.Minute), v, tb, rwo, false)
		if err == nil {
			break
		}
		if status.Code(err) != codes.FailedPrecondition || time.Since(restarted) > lapse/2 {
			t.Fatalf("publish on the second node after the first restarted without its mount: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("the second node published %s after the first node's plugin was ready again", time.Since(restarted).Round(time.Millisecond))
	cb.Unpublish(t, v, tb)
	ca.Delete(t, v)
}
