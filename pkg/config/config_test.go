package config

import (
	"strings"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	ok := Default()
	ok.NodeID = "n1"
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	tests := map[string]func(*Config){
		"--node-id is required": func(c *Config) { c.NodeID = "" },
		"--mode":                func(c *Config) { c.Mode = "both" },
		"--endpoint":            func(c *Config) { c.Endpoint = "http://x" },
		"--driver-name":         func(c *Config) { c.DriverName = "-bad" },
		"--state-dir":           func(c *Config) { c.StateDir = "rel" },
		"--default-on-delete":   func(c *Config) { c.DefaultOnDelete = "purge" },
		"--mount-timeout":       func(c *Config) { c.MountTimeout = time.Millisecond },
		"must have 1 to 63":     func(c *Config) { c.DriverName = strings.Repeat("a", 64) },
		"--cluster-id \"a b\"":  func(c *Config) { c.ClusterID = "a b" },
		"--cluster-id \"aaaa":   func(c *Config) { c.ClusterID = strings.Repeat("a", 129) },
	}
	for want, mutate := range tests {
		c := ok
		mutate(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v", want, err)
		}
	}
	ctl := ok
	ctl.ClusterID = "prod-eu:3f2c8a1e-0b7d-4c55-9a0e-1f2d3c4b5a69"
	ctl.Mode, ctl.NodeID = ModeController, ""
	if err := ctl.Validate(); err != nil {
		t.Errorf("controller without node id: %v", err)
	}
}

func TestParseEndpoint(t *testing.T) {
	for ep, want := range map[string]string{
		"unix:///csi/csi.sock":  "unix /csi/csi.sock",
		"unix://rel/csi.sock":   "unix rel/csi.sock",
		"tcp://127.0.0.1:10000": "tcp 127.0.0.1:10000",
	} {
		n, a, err := ParseEndpoint(ep)
		if err != nil || n+" "+a != want {
			t.Errorf("ParseEndpoint(%q) = %s %s %v", ep, n, a, err)
		}
	}
	for _, ep := range []string{"", "unix://", "tcp://", "/csi.sock", "udp://x:1"} {
		if _, _, err := ParseEndpoint(ep); err == nil {
			t.Errorf("ParseEndpoint(%q) accepted", ep)
		}
	}
}
