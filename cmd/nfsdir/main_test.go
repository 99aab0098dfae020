package main

import (
	"strings"
	"testing"
	"time"

	"github.com/nfsdir/nfsdir/pkg/config"
	"github.com/nfsdir/nfsdir/pkg/migrate"
	"github.com/nfsdir/nfsdir/pkg/params"
)

func TestParseFlags(t *testing.T) {
	cfg, ver, err := parseFlags([]string{"--endpoint=tcp://127.0.0.1:9000", "--node-id=n1", "--mode=node",
		"--driver-name=nfs.example.com", "--default-on-delete=Archive", "--mount-timeout=30s", "-v=4"})
	if err != nil || ver {
		t.Fatal(err)
	}
	if cfg.Endpoint != "tcp://127.0.0.1:9000" || cfg.NodeID != "n1" || cfg.Mode != config.ModeNode ||
		cfg.DriverName != "nfs.example.com" || cfg.DefaultOnDelete != params.Archive || cfg.MountTimeout != 30*time.Second {
		t.Errorf("parsed %+v", cfg)
	}
	if _, ver, err := parseFlags([]string{"--version", "--mode=bogus"}); err != nil || !ver {
		t.Errorf("--version: %v %v", ver, err)
	}
	def, _, err := parseFlags([]string{"--node-id=n"})
	if err != nil || def.Endpoint != "unix:///csi/csi.sock" || def.Mode != config.ModeAll || def.StateDir != "/var/lib/nfsdir" ||
		def.DefaultOnDelete != params.Delete || def.MountTimeout != 2*time.Minute || def.DriverName != "nfsdir.csi.io" {
		t.Errorf("defaults %+v %v", def, err)
	}
}

func TestBadFlagsGiveOneClearLine(t *testing.T) {
	for args, want := range map[string]string{
		"--mode=both":                       `--mode "both"`,
		"--mode=node":                       "--node-id is required",
		"--node-id=n --endpoint=ftp://x":    "--endpoint",
		"--node-id=n --mount-timeout=1ms":   "--mount-timeout",
		"--node-id=n --mount-timeout=abc":   "mount-timeout",
		"--node-id=n --default-on-delete=x": "--default-on-delete",
		"--node-id=n --unknown":             "unknown flag",
		"--node-id=n extra":                 "unexpected argument",
	} {
		_, _, err := parseFlags(strings.Fields(args))
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: error %q, want one line containing %q", args, err, want)
		}
	}
}

func TestAdoptTakesItsPlaceFromALegacyID(t *testing.T) {
	a, err := parseAdopt([]string{"--legacy-id=nfs.example#srv/k8s#pvc-1#pvc-1#delete", "--on-delete=archive"})
	if err != nil || a.server != "nfs.example" || a.share != "/srv/k8s" || a.subDir != "pvc-1" || a.name != "adopted-pvc-1" {
		t.Errorf("parseAdopt = %+v, %v", a, err)
	}
	if _, err := parseAdopt([]string{"--legacy-id=nonsense"}); err == nil || !strings.Contains(err.Error(), "--legacy-id") {
		t.Errorf("bad legacy ID: %v", err)
	}
}

func TestAdoptRecordsClaimAndCluster(t *testing.T) {
	base := []string{"--server=nfs.example", "--share=/srv", "--subdir=team-a/data"}
	a, err := parseAdopt(append(base, "--claim=team-a/data", "--cluster-id=prod-eu-1"))
	if err != nil || a.claim != "team-a/data" || a.clusterID != "prod-eu-1" {
		t.Errorf("parseAdopt = %+v, %v", a, err)
	}
	for want, args := range map[string][]string{
		`--claim "data": want namespace/name`:   {"--claim=data", "--cluster-id=c"},
		`--claim "a/b/c"`:                       {"--claim=a/b/c", "--cluster-id=c"},
		`--cluster-id "a b"`:                    {"--claim=a/b", "--cluster-id=a b"},
		"--claim and --cluster-id go together":  {"--claim=a/b"},
		"--claim and --cluster-id go together ": {"--cluster-id=c"},
	} {
		if _, err := parseAdopt(append(base, args...)); err == nil || !strings.Contains(err.Error(), strings.TrimSpace(want)) {
			t.Errorf("%v: %v, want %q", args, err, want)
		}
	}
}

func TestMigrationRecordsEachClaimAndTheCluster(t *testing.T) {
	r := adoptRequest(migrate.Item{PV: "pv-1", Claim: "team-a/data", SubDir: "team-a/data", OnDelete: params.Archive}, "nfsvers=4.1", "prod-eu-1")
	if r.Claim != "team-a/data" || r.Cluster != "prod-eu-1" || r.Name != "pv-1" || r.Options != "nfsvers=4.1" {
		t.Errorf("adoptRequest = %+v", r)
	}
	if _, err := parseMigrate([]string{"--from=csi-driver-nfs", "--cluster-id=a b"}); err == nil || !strings.Contains(err.Error(), "--cluster-id") {
		t.Errorf("bad --cluster-id: %v", err)
	}
}
