package main

import (
	"strings"
	"testing"
)

func TestParseQuotaAgentExports(t *testing.T) {
	_, cfg, err := parseQuotaAgent([]string{"--export", "/srv/k8s=/srv/k8s", "--copy-export", "/=/srv/nfs", "--copy-rate", "500", "--copy-workers", "3"})
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
		if _, _, err := parseQuotaAgent(bad); err == nil || !strings.Contains(err.Error(), bad[0]) {
			t.Errorf("%v: %v", bad, err)
		}
	}
}
