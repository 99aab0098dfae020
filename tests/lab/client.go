package lab

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Client is a CSI client of a driver under test.
type Client struct {
	Identity   csi.IdentityClient
	Controller csi.ControllerClient
	Node       csi.NodeClient
	conn       *grpc.ClientConn
}

// Connect dials the driver's endpoint; the connection closes when the test
// ends.
func Connect(t testing.TB, endpoint string) *Client {
	t.Helper()
	conn, err := grpc.NewClient(strings.Replace(endpoint, "unix://", "unix:", 1), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &Client{Identity: csi.NewIdentityClient(conn), Controller: csi.NewControllerClient(conn), Node: csi.NewNodeClient(conn), conn: conn}
}

// MountCap returns a filesystem capability with the given mount flags.
func MountCap(mode csi.VolumeCapability_AccessMode_Mode, flags ...string) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{MountFlags: flags}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode},
	}
}

// RWX is the MULTI_NODE_MULTI_WRITER capability with the given mount flags.
func RWX(flags ...string) *csi.VolumeCapability {
	return MountCap(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER, flags...)
}

// Ctx returns a context bounded by d, cancelled when the test ends.
func Ctx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Create calls CreateVolume and fails the test on error.
func (c *Client) Create(t testing.TB, name string, params map[string]string, vc *csi.VolumeCapability) *csi.Volume {
	t.Helper()
	resp, err := c.Controller.CreateVolume(Ctx(t, 2*time.Minute), &csi.CreateVolumeRequest{
		Name: name, Parameters: params, VolumeCapabilities: []*csi.VolumeCapability{vc},
		CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 30},
	})
	if err != nil {
		t.Fatalf("CreateVolume %s: %v", name, err)
	}
	return resp.GetVolume()
}

// Publish calls NodePublishVolume and fails the test on error.
func (c *Client) Publish(t testing.TB, v *csi.Volume, target string, vc *csi.VolumeCapability, readOnly bool) {
	t.Helper()
	if err := c.TryPublish(Ctx(t, 3*time.Minute), v, target, vc, readOnly); err != nil {
		t.Fatalf("NodePublishVolume %s on %s: %v", v.GetVolumeId(), target, err)
	}
}

// TryPublish calls NodePublishVolume and returns its error.
func (c *Client) TryPublish(ctx context.Context, v *csi.Volume, target string, vc *csi.VolumeCapability, readOnly bool) error {
	_, err := c.Node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{
		VolumeId: v.GetVolumeId(), TargetPath: target, VolumeCapability: vc,
		VolumeContext: v.GetVolumeContext(), Readonly: readOnly,
	})
	return err
}

// TryStage calls NodeStageVolume.
func (c *Client) TryStage(ctx context.Context, v *csi.Volume, staging string, vc *csi.VolumeCapability) error {
	_, err := c.Node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{
		VolumeId: v.GetVolumeId(), StagingTargetPath: staging, VolumeCapability: vc, VolumeContext: v.GetVolumeContext(),
	})
	return err
}

// Stage calls NodeStageVolume and fails the test on error.
func (c *Client) Stage(t testing.TB, v *csi.Volume, staging string, vc *csi.VolumeCapability) {
	t.Helper()
	if err := c.TryStage(Ctx(t, 2*time.Minute), v, staging, vc); err != nil {
		t.Fatalf("NodeStageVolume %s: %v", staging, err)
	}
}

// Unstage calls NodeUnstageVolume and fails the test on error.
func (c *Client) Unstage(t testing.TB, v *csi.Volume, staging string) {
	t.Helper()
	if _, err := c.Node.NodeUnstageVolume(Ctx(t, 2*time.Minute), &csi.NodeUnstageVolumeRequest{VolumeId: v.GetVolumeId(), StagingTargetPath: staging}); err != nil {
		t.Fatalf("NodeUnstageVolume %s: %v", staging, err)
	}
}

// PublishStaged calls NodePublishVolume for a volume staged at staging and
// fails the test on error.
func (c *Client) PublishStaged(t testing.TB, v *csi.Volume, staging, target string, vc *csi.VolumeCapability, readOnly bool) {
	t.Helper()
	if _, err := c.Node.NodePublishVolume(Ctx(t, 2*time.Minute), &csi.NodePublishVolumeRequest{
		VolumeId: v.GetVolumeId(), StagingTargetPath: staging, TargetPath: target, VolumeCapability: vc,
		VolumeContext: v.GetVolumeContext(), Readonly: readOnly,
	}); err != nil {
		t.Fatalf("NodePublishVolume %s from %s: %v", target, staging, err)
	}
}

// Unpublish calls NodeUnpublishVolume and fails the test on error.
func (c *Client) Unpublish(t testing.TB, v *csi.Volume, target string) {
	t.Helper()
	if _, err := c.Node.NodeUnpublishVolume(Ctx(t, 2*time.Minute), &csi.NodeUnpublishVolumeRequest{VolumeId: v.GetVolumeId(), TargetPath: target}); err != nil {
		t.Fatalf("NodeUnpublishVolume %s: %v", target, err)
	}
}

// Delete calls DeleteVolume and fails the test on error.
func (c *Client) Delete(t testing.TB, v *csi.Volume) {
	t.Helper()
	if _, err := c.Controller.DeleteVolume(Ctx(t, 2*time.Minute), &csi.DeleteVolumeRequest{VolumeId: v.GetVolumeId()}); err != nil {
		t.Fatalf("DeleteVolume %s: %v", v.GetVolumeId(), err)
	}
}

// MountInfo returns the /proc/self/mountinfo line of target, or "".
func MountInfo(t testing.TB, target string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && f[4] == target {
			return line
		}
	}
	return ""
}

// Processes returns the command names of running processes whose name
// starts with prefix (read from /proc).
func Processes(prefix string) []string {
	ents, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + e.Name() + "/comm")
		if err != nil {
			continue
		}
		if name := strings.TrimSpace(string(b)); strings.HasPrefix(name, prefix) {
			out = append(out, name+"["+e.Name()+"]")
		}
	}
	return out
}
