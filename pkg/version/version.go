// Package version holds build information set with -ldflags
// "-X github.com/nfsdir/nfsdir/pkg/version.Version=v1.2.3 ...".
package version

// Set at build time.
var (
	Version = "v0.1.0"
	Commit  = "unknown"
)

// String returns "<version> (<commit>)".
func String() string { return Version + " (" + Commit + ")" }
