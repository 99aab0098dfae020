// Package safepath holds the lexical rules for paths the driver builds inside
// a share: a volume's subdirectory, its archive name and its trash name. The
// rules are strict on purpose: a path that passes is relative, clean, has no
// "." or ".." segment, no empty segment, no control character, and does not
// enter the driver's metadata area. Filesystem work is still done through
// os.Root so that symlinks cannot escape; these rules make sure the driver
// never even asks for a path outside its volume.
package safepath

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path"
	"strings"
)

// MetaDir is the name of the driver's metadata area at the share root. No
// volume may live in it.
const MetaDir = ".nfsdir"

// Limits on a volume path.
const (
	MaxSegment = 255  // bytes in one path segment (NAME_MAX)
	MaxPath    = 1024 // bytes in a whole volume path
	MaxDepth   = 16   // segments in a volume path
)

// CheckVolumePath returns nil when p is acceptable as a volume directory
// relative to the share root, and otherwise an error that says what is wrong
// with it, for the operator.
func CheckVolumePath(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("is empty (a volume cannot be the share root)")
	case path.Clean("/"+p) == "/":
		return fmt.Errorf("%q resolves to the share root", p)
	case strings.HasPrefix(p, "/"):
		return fmt.Errorf("%q must be relative to the share, not absolute", p)
	case len(p) > MaxPath:
		return fmt.Errorf("is %d bytes long; at most %d are allowed", len(p), MaxPath)
	}
	segs := strings.Split(p, "/")
	if len(segs) > MaxDepth {
		return fmt.Errorf("%q has %d levels; at most %d are allowed", p, len(segs), MaxDepth)
	}
	for _, s := range segs {
		if err := checkSegment(s); err != nil {
			return fmt.Errorf("%q: %v", p, err)
		}
	}
	if segs[0] == MetaDir {
		return fmt.Errorf("%q lies inside nfsdir's metadata area %s", p, MetaDir)
	}
	return nil
}

// InMetaDir reports whether any segment of the slash-separated path p is
// nfsdir's metadata directory: a mount of such a path would expose records
// and trash, whatever share it is on.
func InMetaDir(p string) bool {
	for _, s := range strings.Split(p, "/") {
		if s == MetaDir {
			return true
		}
	}
	return false
}

// CheckStaticPath returns nil when p is acceptable as the directory of a
// volume nfsdir did not create (a static or csi-driver-nfs volume), which is
// only ever mounted: "" (the share itself) or a clean relative path without
// "." or ".." segments.
func CheckStaticPath(p string) error {
	if p == "" {
		return nil
	}
	if strings.HasPrefix(p, "/") {
		return fmt.Errorf("%q must be relative to the share", p)
	}
	for _, s := range strings.Split(p, "/") {
		if err := checkSegment(s); err != nil {
			return fmt.Errorf("%q: %v", p, err)
		}
	}
	return nil
}

func checkSegment(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("empty path segment (double or trailing slash)")
	case s == "." || s == "..":
		return fmt.Errorf("%q segments are not allowed", s)
	case len(s) > MaxSegment:
		return fmt.Errorf("segment of %d bytes exceeds %d", len(s), MaxSegment)
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("control character %U in path", r)
		}
	}
	return nil
}

// IsWithin reports whether path p equals dir or lies below it; both are
// clean relative paths. Unlike a string prefix test, "a/bc" is not within
// "a/b".
func IsWithin(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// ArchiveName returns the name, at the share root, that an archived volume
// gets: "archived-" followed by the volume path with "/" replaced by "-",
// and a numeric suffix when attempt > 0. Names that would be longer than one
// segment allows are shortened with a hash so that they stay unique.
func ArchiveName(volumePath string, attempt int) string {
	name := "archived-" + strings.ReplaceAll(volumePath, "/", "-")
	suffix := ""
	if attempt > 0 {
		suffix = fmt.Sprintf("-%d", attempt)
	}
	if len(name)+len(suffix) > MaxSegment {
		sum := sha256.Sum256([]byte(volumePath))
		h := "-" + hex.EncodeToString(sum[:8])
		name = name[:MaxSegment-len(suffix)-len(h)] + h
	}
	return name + suffix
}

// Parents returns the parent directories of a volume path, deepest first,
// not including the share root: "a/b/c" gives ["a/b", "a"].
func Parents(p string) []string {
	var out []string
	for i := strings.LastIndexByte(p, '/'); i > 0; i = strings.LastIndexByte(p, '/') {
		p = p[:i]
		out = append(out, p)
	}
	return out
}

// ArchiveEntry returns the path below the unpacking directory that an
// entry named name of a tar archive gets, or ok false when the entry must
// be left out: names are taken as relative (a leading "/" is dropped, as
// tar does), "." and empty segments fall away, and any ".." segment refuses
// the entry. The root itself is ".". A returned path other than "." is
// clean, relative, and has no "." or ".." segment.
func ArchiveEntry(name string) (p string, ok bool) {
	var parts []string
	for _, s := range strings.Split(name, "/") {
		switch s {
		case "", ".":
		case "..":
			return "", false
		default:
			parts = append(parts, s)
		}
	}
	if len(parts) == 0 {
		return ".", true
	}
	return strings.Join(parts, "/"), true
}
