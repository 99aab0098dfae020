// Package stage runs the CSI conformance suite against a node plugin in
// NodeStage mode: NodeStageVolume and NodeUnstageVolume, and publishes
// from the staging path.
package stage

import (
	"testing"

	"github.com/nfsdir/nfsdir/pkg/config"
	"github.com/nfsdir/nfsdir/tests/sanity"
)

func TestSanityNodeStage(t *testing.T) {
	sanity.Run(t, func(c *config.Config) { c.NodeStage = true })
}
