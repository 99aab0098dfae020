package main

import (
	"strings"
	"testing"
)

func TestParseQuotaAgentExports(t *testing.T) {
	_, cfg, err := parseAgent([]string{"--export", "/srv/k8s=/srv/k8s", "--copy-export", "/=/srv/nfs", "--copy-rate", "500", "--copy-workers", "3"})
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Exports) != 1 || cfg.Exports[0].Share != "/srv/k8s" || len(cfg.CopyExports) != 1 || cfg.CopyExports[0].Dir != "/srv/nfs" {
		t.Errorf("exports %+v, copies only %+v", cfg.Exports, cfg.CopyExports)
	}
	if cfg.CopyWorkers != 3 || cfg.Copier.Limit == nil || cfg.Copier.MaxOpen == 0 {
		t.Errorf("copier %+v, workers %d", cfg.Copier, cfg.CopyWorkers)
	}
	for _, bad := range [][]string{{"--copy-export", "/srv"}, {"--copy-workers", "0"}, {"--copy-rate", "-1"}} {
		if _, _, err := parseAgent(bad); err == nil || !strings.Contains(err.Error(), bad[0]) {
			t.Errorf("%v: %v", bad, err)
		}
	}
}

// TestAgentsFormerNameStillRuns: `nfsdir quota-agent` runs the agent for
// one more release, with a warning that names the new command.
func TestAgentsFormerNameStillRuns(t *testing.T) {
	now, warning := subcommand("agent")
	if now == nil || warning != "" {
		t.Fatalf("agent: %v, %q", now != nil, warning)
	}
	former, warning := subcommand("quota-agent")
	if former == nil || !strings.Contains(warning, `"nfsdir agent"`) {
		t.Errorf("quota-agent: %v, %q", former != nil, warning)
	}
	if sub, _ := subcommand("serve"); sub != nil {
		t.Error("an unknown name is a subcommand")
	}
}
