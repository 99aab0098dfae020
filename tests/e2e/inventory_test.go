package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nfsdir/nfsdir/pkg/config"
	"github.com/nfsdir/nfsdir/tests/lab"
)

// listAll pages through ListVolumes max at a time, running between after
// each page, and returns the IDs listed.
func listAll(t *testing.T, c *lab.Client, max int32, between func(page int)) []string {
	t.Helper()
	var ids []string
	token := ""
	for page := 0; ; page++ {
		r, err := c.Controller.ListVolumes(lab.Ctx(t, time.Minute), &csi.ListVolumesRequest{MaxEntries: max, StartingToken: token})
		if err != nil {
			t.Fatalf("ListVolumes page %d: %v", page, err)
		}
		if len(r.Entries) > int(max) {
			t.Fatalf("page %d has %d entries, more than %d", page, len(r.Entries), max)
		}
		for _, e := range r.Entries {
			ids = append(ids, e.Volume.VolumeId)
		}
		if r.NextToken == "" {
			return ids
		}
		token = r.NextToken
		if between != nil {
			between(page)
		}
	}
}

// TestListVolumesOnRealNFS: ListVolumes pages through the volumes on the
// share with the IDs CreateVolume gave them (a shared volume and one with
// other mount options included), each once, while volumes are created and
// deleted between pages; an unknown token is Aborted. ControllerGetVolume
// answers from the record; ControllerGetVolumeHealth says DATA_LOSS for a
// directory removed or replaced behind nfsdir's back and DEGRADED for a
// volume over its capacity.
func TestListVolumesOnRealNFS(t *testing.T) {
	c := start(t, func(cfg *config.Config) { cfg.CountEvery = time.Second; cfg.CountRate = 0 })
	vc := lab.RWX("nfsvers=4.1")
	var vols []*csi.Volume
	for i := range 7 {
		vols = append(vols, c.Create(t, fmt.Sprintf("pvc-list-%d", i), params("onDelete", "delete"), vc))
	}
	other := lab.RWX("nfsvers=4.1", "noac")
	vols = append(vols, c.Create(t, "pvc-list-noac", params("onDelete", "delete"), other))
	vols = append(vols, c.Create(t, "pvc-list-shared", params("onDelete", "retain", "allowSharedSubDir", "true", "subDir", "common-list"), vc))
	// Other tests' volumes may be on the share too: only ours are
	// counted, and nothing may be listed twice.
	once := func(ids []string, vols []*csi.Volume) {
		t.Helper()
		seen := map[string]int{}
		for _, id := range ids {
			if seen[id]++; seen[id] > 1 {
				t.Errorf("%q listed twice", id)
			}
		}
		for _, v := range vols {
			if seen[v.VolumeId] != 1 {
				t.Errorf("%q listed %d times, want once", v.VolumeId, seen[v.VolumeId])
			}
		}
	}
	once(listAll(t, c, 4, nil), vols)

	// Created and deleted between pages: those present throughout are
	// listed exactly once; nothing is listed twice.
	var late *csi.Volume
	ids := listAll(t, c, 3, func(page int) {
		if page == 0 {
			c.Delete(t, vols[0])
			late = c.Create(t, "pvc-list-late", params("onDelete", "delete"), vc)
		}
	})
	once(ids, vols[1:])
	defer c.Delete(t, late)
	if _, err := c.Controller.ListVolumes(lab.Ctx(t, time.Minute), &csi.ListVolumesRequest{StartingToken: "not-a-token"}); status.Code(err) != codes.Aborted {
		t.Errorf("ListVolumes with a made-up token: %v, want Aborted", err)
	}

	get, err := c.Controller.ControllerGetVolume(lab.Ctx(t, time.Minute), &csi.ControllerGetVolumeRequest{VolumeId: vols[1].VolumeId})
	if err != nil || get.Volume.VolumeId != vols[1].VolumeId || get.Volume.CapacityBytes != vols[1].CapacityBytes {
		t.Fatalf("ControllerGetVolume: %v %v", get, err)
	}
	if _, err := c.Controller.ControllerGetVolume(lab.Ctx(t, time.Minute), &csi.ControllerGetVolumeRequest{VolumeId: vols[0].VolumeId}); status.Code(err) != codes.NotFound {
		t.Errorf("ControllerGetVolume of a deleted volume: %v", err)
	}

	healthOf := func(v *csi.Volume) []*csi.VolumeHealth_VolumeHealthEntry {
		r, err := c.Controller.ControllerGetVolumeHealth(lab.Ctx(t, time.Minute), &csi.ControllerGetVolumeHealthRequest{VolumeId: v.VolumeId})
		if err != nil {
			t.Fatalf("ControllerGetVolumeHealth: %v", err)
		}
		return r.VolumeHealth.HealthStatuses
	}
	if h := healthOf(vols[1]); len(h) != 0 {
		t.Errorf("health of a sound volume: %v", h)
	}
	dir := func(v *csi.Volume) string { return onExport(v.VolumeContext["subDir"]) }
	// Replaced by another directory.
	must(t, os.Rename(dir(vols[3]), onExport("moved-away-3")))
	must(t, os.Mkdir(dir(vols[3]), 0o777))
	if h := healthOf(vols[3]); len(h) != 1 || h[0].Status != csi.VolumeHealthErrorType_DATA_LOSS || h[0].Reason != "DirectoryReplaced" {
		t.Errorf("health of a volume whose directory was replaced: %v", h)
	}
	must(t, os.Remove(dir(vols[3])))
	must(t, os.Rename(onExport("moved-away-3"), dir(vols[3])))
	// Over its capacity: a volume of 1 MiB gets 2 MiB.
	small, err := c.Controller.CreateVolume(lab.Ctx(t, time.Minute), &csi.CreateVolumeRequest{Name: "pvc-list-small", Parameters: params("onDelete", "delete"),
		VolumeCapabilities: []*csi.VolumeCapability{vc}, CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Delete(t, small.Volume)
	must(t, os.WriteFile(filepath.Join(dir(small.Volume), "blob"), []byte(strings.Repeat("z", 2<<20)), 0o644))
	var h []*csi.VolumeHealth_VolumeHealthEntry
	for end := time.Now().Add(time.Minute); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		if h = healthOf(small.Volume); len(h) == 1 {
			break
		}
	}
	if len(h) != 1 || h[0].Status != csi.VolumeHealthErrorType_DEGRADED || h[0].Reason != "OverCapacity" || !strings.Contains(h[0].Message, "of 1.0 MiB") {
		t.Errorf("health of a volume over its capacity: %v", h)
	}
	// Removed behind nfsdir's back.
	must(t, os.Rename(dir(vols[2]), onExport("moved-away-2")))
	if h := healthOf(vols[2]); len(h) != 1 || h[0].Status != csi.VolumeHealthErrorType_DATA_LOSS || h[0].Reason != "DirectoryMissing" {
		t.Errorf("health of a volume whose directory is gone: %v", h)
	}
	// The health listing says the same, for our volumes.
	ours := map[string]bool{small.Volume.VolumeId: true}
	for _, v := range vols {
		ours[v.VolumeId] = true
	}
	r, err := c.Controller.ControllerListVolumeHealth(lab.Ctx(t, time.Minute), &csi.ControllerListVolumeHealthRequest{MaxEntries: 2})
	var reasons []string
	for err == nil {
		for _, e := range r.Entries {
			for _, s := range e.HealthStatuses {
				if ours[e.VolumeId] {
					reasons = append(reasons, s.Reason)
				}
			}
		}
		if r.NextToken == "" {
			break
		}
		r, err = c.Controller.ControllerListVolumeHealth(lab.Ctx(t, time.Minute), &csi.ControllerListVolumeHealthRequest{MaxEntries: 2, StartingToken: r.NextToken})
	}
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(reasons)
	if fmt.Sprint(reasons) != "[DirectoryMissing OverCapacity]" {
		t.Errorf("ControllerListVolumeHealth reasons: %v", reasons)
	}
	must(t, os.Rename(onExport("moved-away-2"), dir(vols[2])))
	for _, v := range vols[1:] {
		c.Delete(t, v)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
