package main

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/nfsdir/nfsdir/pkg/config"
	"github.com/nfsdir/nfsdir/tests/docs/md"
)

// TestConfigurationPageNamesEveryFlag: every flag of nfsdir and of its
// subcommands has a row in its table on docs/configuration.md, and every
// flag a row names exists.
func TestConfigurationPageNamesEveryFlag(t *testing.T) {
	page, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	driver, _ := driverFlags(&cfg)
	for _, c := range []struct {
		section string
		flags   *pflag.FlagSet
	}{
		{"Driver flags", driver},
		{"Server agent flags", agentFlags(&agentArgs{})},
		{"nfsdir adopt flags", adoptFlags(&adoptArgs{})},
		{"nfsdir migrate flags", migrateFlags(&migrateArgs{})},
		{"nfsdir daemon flags", daemonFlags(&daemonArgs{})},
	} {
		text, ok := md.Section(string(page), c.section)
		if !ok {
			t.Errorf("docs/configuration.md has no section %q", c.section)
			continue
		}
		documented := documentedFlags(text)
		var defined []string
		c.flags.VisitAll(func(f *pflag.Flag) { defined = append(defined, f.Name) })
		for _, f := range defined {
			if !slices.Contains(documented, f) {
				t.Errorf("%s: --%s is not on the page", c.section, f)
			}
		}
		for _, f := range documented {
			if !slices.Contains(defined, f) {
				t.Errorf("%s: the page names --%s, which is no flag", c.section, f)
			}
		}
	}
}

// documentedFlags returns the flags the first cells of a section's tables
// name (`--flag`, several to a cell).
func documentedFlags(section string) []string {
	var out []string
	for _, cell := range md.FirstCells(section) {
		for _, c := range md.Codes(cell) {
			if name, ok := strings.CutPrefix(c, "--"); ok {
				out = append(out, name)
			}
		}
	}
	return out
}
