// Command demo is the main job of `make demo`: inside the NFS lab guest it
// starts the real nfsdir binary, provisions a volume on the lab's kernel NFS
// server, mounts it on two targets, writes on one and reads on the other,
// unmounts, deletes the volume and stops the driver, printing each step.
package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

const (
	socket = "/run/nfsdir/csi.sock"
	share  = "/export"
)

var step int

func say(format string, args ...any) {
	step++
	fmt.Printf("[%2d] %s\n", step, fmt.Sprintf(format, args...))
}

func detail(format string, args ...any) { fmt.Printf("       %s\n", fmt.Sprintf(format, args...)) }

func fail(err error) {
	fmt.Printf("demo: FAILED: %v\n", err)
	os.Exit(1)
}

func main() {
	if os.Getenv("NFSDIR_LAB") != "1" {
		fail(fmt.Errorf("run me in the NFS lab: make demo"))
	}
	server := os.Getenv("NFSDIR_LAB_SERVER")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	say("NFS lab is up: kernel nfsd exporting %s:%s (NFS v3, v4.1, v4.2)", server, share)
	drv := exec.Command("nfsdir", "--mode=all", "--node-id=lab-node", "--endpoint=unix://"+socket,
		"--state-dir=/run/nfsdir/state", "--mount-timeout=30s", "-v=2")
	var logs bytes.Buffer
	drv.Stdout, drv.Stderr = &logs, &logs
	if err := drv.Start(); err != nil {
		fail(fmt.Errorf("start nfsdir: %w", err))
	}
	defer drv.Process.Kill()
	conn, err := grpc.NewClient("unix:"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fail(err)
	}
	defer conn.Close()
	id, ctl, node := csi.NewIdentityClient(conn), csi.NewControllerClient(conn), csi.NewNodeClient(conn)

	start := time.Now()
	for {
		r, err := id.Probe(ctx, &csi.ProbeRequest{})
		if err == nil && r.GetReady().GetValue() {
			break
		}
		if time.Since(start) > 30*time.Second {
			fail(fmt.Errorf("driver not ready after 30s: %v\n%s", err, logs.String()))
		}
		time.Sleep(50 * time.Millisecond)
	}
	info, err := id.GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
	if err != nil {
		fail(err)
	}
	say("started %s %s (pid %d); Probe ready after %s", info.GetName(), info.GetVendorVersion(), drv.Process.Pid, time.Since(start).Round(time.Millisecond))

	vc := &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{MountFlags: []string{"nfsvers=4.2", "hard"}}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
	}
	params := map[string]string{
		"server": server, "share": share, "subDir": "${pvc.metadata.namespace}/${pvc.metadata.name}", "onDelete": "delete",
		"csi.storage.k8s.io/pvc/name": "shared-data", "csi.storage.k8s.io/pvc/namespace": "team-a",
		"csi.storage.k8s.io/pv/name": "pvc-0d3f5e1c",
	}
	t0 := time.Now()
	cv, err := ctl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-0d3f5e1c", Parameters: params,
		VolumeCapabilities: []*csi.VolumeCapability{vc}, CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 30}})
	if err != nil {
		fail(err)
	}
	vol := cv.GetVolume()
	dir := filepath.Join(share, vol.GetVolumeContext()["subDir"])
	st, err := os.Stat(dir)
	if err != nil {
		fail(err)
	}
	say("CreateVolume pvc-0d3f5e1c (subDir %q) in %s", params["subDir"], time.Since(t0).Round(time.Millisecond))
	detail("volume ID: %s", vol.GetVolumeId())
	detail("directory on the server: %s (mode %s)", dir, st.Mode())

	// kubelet's layout: the node plugin mounts nowhere else; kubelet makes
	// the parent directory before it calls NodePublishVolume.
	targets := []string{"/var/lib/kubelet/pods/pod-a/volumes/kubernetes.io~csi/shared/mount",
		"/var/lib/kubelet/pods/pod-b/volumes/kubernetes.io~csi/shared/mount"}
	for _, tgt := range targets {
		if err := os.MkdirAll(filepath.Dir(tgt), 0o750); err != nil {
			fail(err)
		}
		t0 := time.Now()
		if _, err := node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: vol.GetVolumeId(),
			TargetPath: tgt, VolumeCapability: vc, VolumeContext: vol.GetVolumeContext()}); err != nil {
			fail(err)
		}
		say("NodePublishVolume on %s in %s", tgt, time.Since(t0).Round(time.Millisecond))
		detail("mount: %s", mountLine(tgt))
	}

	msg := fmt.Sprintf("hello from pod-a at %s\n", time.Now().UTC().Format(time.RFC3339))
	if err := os.WriteFile(filepath.Join(targets[0], "greeting.txt"), []byte(msg), 0o644); err != nil {
		fail(err)
	}
	say("pod-a wrote greeting.txt: %q", strings.TrimSpace(msg))
	got, err := os.ReadFile(filepath.Join(targets[1], "greeting.txt"))
	if err != nil || string(got) != msg {
		fail(fmt.Errorf("pod-b read %q, %v", got, err))
	}
	say("pod-b read it back over its own NFS mount: %q", strings.TrimSpace(string(got)))

	stats, err := node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: vol.GetVolumeId(), VolumePath: targets[1]})
	if err != nil {
		fail(err)
	}
	u := stats.GetUsage()[0]
	say("NodeGetVolumeStats: %d MiB total, %d MiB available", u.GetTotal()>>20, u.GetAvailable()>>20)

	for _, tgt := range targets {
		if _, err := node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: vol.GetVolumeId(), TargetPath: tgt}); err != nil {
			fail(err)
		}
		if mountLine(tgt) != "" {
			fail(fmt.Errorf("%s still mounted", tgt))
		}
		say("NodeUnpublishVolume %s: unmounted and removed", tgt)
	}

	t0 = time.Now()
	if _, err := ctl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: vol.GetVolumeId()}); err != nil {
		fail(err)
	}
	say("DeleteVolume returned in %s (onDelete=delete: moved to trash, purged in the background)", time.Since(t0).Round(time.Millisecond))
	for i := 0; ; i++ {
		ents, _ := os.ReadDir(filepath.Join(share, ".nfsdir/trash"))
		if len(ents) == 0 {
			break
		}
		if i > 300 {
			fail(fmt.Errorf("trash not purged"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := os.Stat(dir); err == nil {
		fail(fmt.Errorf("%s still exists", dir))
	}
	if _, err := os.Stat(filepath.Dir(dir)); err == nil {
		fail(fmt.Errorf("empty parent %s left behind", filepath.Dir(dir)))
	}
	say("%s and its empty parent are gone from the server; trash purged", dir)

	_ = drv.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- drv.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			fail(fmt.Errorf("nfsdir exited with %v\n%s", err, logs.String()))
		}
	case <-time.After(40 * time.Second):
		fail(fmt.Errorf("nfsdir did not stop on SIGTERM"))
	}
	say("SIGTERM: nfsdir finished in-flight calls, released its share mount and exited 0")
	fmt.Println("demo: OK")
}

// mountLine returns "source type options" of the mount at target, or "".
func mountLine(target string) string {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 9 && f[4] == target {
			return f[len(f)-2] + " " + f[len(f)-3] + " " + f[len(f)-1]
		}
	}
	return ""
}
