package chart

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/nfsdir/nfsdir/pkg/version"
)

// The chart's version and appVersion, the binary's version when built
// without flags, the Dockerfile's default and the changelog's latest
// release are one release, and the chart and the image name the license.
func TestVersionsAgree(t *testing.T) {
	b, err := os.ReadFile(chartDir + "/Chart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var chart struct {
		Version, AppVersion string
		Annotations         map[string]string
	}
	if err := yaml.Unmarshal(b, &chart); err != nil {
		t.Fatal(err)
	}
	release := chart.AppVersion
	if chart.Version != release || version.Version != "v"+release {
		t.Errorf("chart version %s, appVersion %s, nfsdir --version %s: want one release", chart.Version, release, version.Version)
	}
	docker, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	// The build stage, the daemons image and the nfsdir image.
	if n, all := strings.Count(string(docker), "ARG VERSION=v"+release+"\n"), strings.Count(string(docker), "ARG VERSION="); n != 3 || all != n {
		t.Errorf("the Dockerfile's stages default to VERSION v%s %d times of %d, want 3", release, n, all)
	}
	if !strings.Contains(string(docker), `org.opencontainers.image.licenses="Apache-2.0"`) || chart.Annotations["artifacthub.io/license"] != "Apache-2.0" {
		t.Error("the image or the chart does not name the license, Apache-2.0")
	}
	changes, err := os.ReadFile("../../CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	releases := regexp.MustCompile(`(?m)^## \[(\d+\.\d+\.\d+)\]`).FindAllStringSubmatch(string(changes), -1)
	if len(releases) == 0 || releases[0][1] != release {
		t.Errorf("CHANGELOG.md's latest release is %v, want %s", releases, release)
	}
	if !strings.Contains(string(changes), "## [Unreleased]") {
		t.Error("CHANGELOG.md has no Unreleased section")
	}
	license, err := os.ReadFile("../../LICENSE")
	if err != nil || !strings.Contains(string(license), "Apache License") || !strings.Contains(string(license), "Version 2.0, January 2004") {
		t.Errorf("LICENSE is not the Apache License 2.0: %v", err)
	}
}
