// Package volumeid defines nfsdir's volume ID: a short, versioned string that
// names the export, the volume's record on the share and the mount options
// needed to reach the share again, and parses csi-driver-nfs IDs so that
// volumes it created keep working on the node.
//
// The ID deliberately does not contain the volume's directory. The directory
// is read from the record nfsdir wrote on the share when it created the
// volume, so a crafted ID cannot make the driver act on a directory nfsdir
// did not create.
//
// Format (version 1), fields separated by "|", each percent-escaped:
//
//	n1|<server>|<share>|<key>.<token>|<options>
//
// A snapshot ID has the same fields under the prefix "s1": the export and
// options of its source volume's share, and the key and token of the
// snapshot's record. Parse never accepts a snapshot ID, nor ParseSnapshot a
// volume ID, so neither can stand for the other.
//
// A volume on a named export (version 2) carries the export's name in
// place of its server and share, so that the export can move (a new
// server, a new address) with its volumes' IDs unchanged:
//
//	n2|<name>|<key>.<token>|<options>
//
// and its snapshots "s2" likewise. The driver's configuration says where
// each name is now (export.Names).
//
// <key> (20 base32 characters) names the record and is derived from the
// volume's directory (and, for a volume sharing its directory, its name);
// <token> (8 base32 characters) is random per creation, so an ID
// of a deleted volume never matches a later volume of the same name.
// <options> is the comma list of mount options used for the share or, when
// the list does not fit in MaxLen, "@" and its 16-hex digest, followed by
// "," and the options needed to reach the share when those fit: a
// controller that does not hold the full list (a new pod with an empty
// state directory) still reaches the share with them.
package volumeid

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/nfsdir/nfsdir/pkg/export"
	"github.com/nfsdir/nfsdir/pkg/mountopts"
	"github.com/nfsdir/nfsdir/pkg/safepath"
)

// MaxLen is the CSI limit on a volume ID, in bytes.
const MaxLen = 128

const (
	prefix          = "n1"
	snapPrefix      = "s1"
	namedPrefix     = "n2"
	namedSnapPrefix = "s2"
	sep             = "|"
	keyLen          = 20
	tokenLen        = 8
	refLen          = 16
)

var b32 = base32.StdEncoding.WithPadding(base32.NoPadding)

// ErrNotNative is returned by Parse for a string that is not an nfsdir ID.
var ErrNotNative = errors.New("not an nfsdir volume ID")

// ID is a parsed nfsdir volume ID.
type ID struct {
	// Name is the export's name, for a volume of a named export; "" for
	// one whose ID holds its server and share. A parsed named ID has no
	// Export until it is looked up (export.Names).
	Name       string
	Export     export.Export
	Key        string // record key, derived from the volume name
	Token      string // random per creation
	Options    string // mount options for the share; with OptionsRef, only those needed to reach it
	OptionsRef string // digest of the mount options, when they did not fit
	// Snapshot marks a snapshot's ID: Key and Token are its record's.
	Snapshot bool
}

// KeyForDir returns the record key of the volume that owns the directory
// subDir.
func KeyForDir(subDir string) string { return key("nfsdir-dir\x00" + subDir) }

// KeyForSharedDir returns the record key of the directory subDir that nfsdir
// created for volumes to share.
func KeyForSharedDir(subDir string) string { return key("nfsdir-shared-dir\x00" + subDir) }

// KeyForShared returns the record key of volume name in a directory that
// several volumes share.
func KeyForShared(subDir, name string) string {
	return key("nfsdir-shared\x00" + subDir + "\x00" + name)
}

// KeyForSnapshot returns the record key of the snapshot named name (its
// CSI name, unique per cluster).
func KeyForSnapshot(name string) string { return key("nfsdir-snapshot\x00" + name) }

// SnapshotOf returns the ID of a snapshot recorded under key and token on
// the share of the volume id: same export, same options.
func SnapshotOf(id ID, key, token string) ID {
	id.Key, id.Token, id.Snapshot = key, token, true
	return id
}

func key(s string) string {
	sum := sha256.Sum256([]byte(s))
	return strings.ToLower(b32.EncodeToString(sum[:]))[:keyLen]
}

// NewToken returns a fresh random creation token.
func NewToken() string {
	var b [5]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux
	return strings.ToLower(b32.EncodeToString(b[:]))
}

// OptionsDigest returns the reference used for options that do not fit.
func OptionsDigest(options string) string {
	sum := sha256.Sum256([]byte(options))
	return hex.EncodeToString(sum[:])[:refLen]
}

// New builds the ID of a volume. It keeps the options inline when the ID
// fits in MaxLen, and otherwise stores their digest in OptionsRef (the caller
// should keep the full options where it can find them by digest) along with
// reach, the subset of options needed to reach the share, when that fits.
// It fails when even the bare digest does not fit.
func New(e export.Export, key, token, options, reach string) (ID, error) {
	return build(ID{Export: e, Key: key, Token: token, Options: options}, reach)
}

// NewNamed is New for a volume of the export named name (at e now).
func NewNamed(name string, e export.Export, key, token, options, reach string) (ID, error) {
	if err := export.CheckName(name); err != nil {
		return ID{}, err
	}
	return build(ID{Name: name, Export: e, Key: key, Token: token, Options: options}, reach)
}

// build fits id in MaxLen, as New says.
func build(id ID, reach string) (ID, error) {
	options := id.Options
	if len(id.String()) <= MaxLen {
		return id, nil
	}
	id.Options, id.OptionsRef = reach, OptionsDigest(options)
	if len(id.String()) <= MaxLen {
		return id, nil
	}
	id.Options = ""
	if n := len(id.String()); n > MaxLen {
		return ID{}, fmt.Errorf("server and share are too long for a CSI volume ID: it would be %d bytes, the limit is %d", n, MaxLen)
	}
	return id, nil
}

// ForShare builds the ID of a volume on a share mounted with opts: New
// with the options as written and the subset needed to reach the share.
func ForShare(e export.Export, key, token string, opts mountopts.Options) (ID, error) {
	return New(e, key, token, opts.String(), opts.ForReach().String())
}

// ForNamedShare is ForShare for a share of the export named name ("":
// none, ForShare).
func ForNamedShare(name string, e export.Export, key, token string, opts mountopts.Options) (ID, error) {
	if name == "" {
		return ForShare(e, key, token, opts)
	}
	return NewNamed(name, e, key, token, opts.String(), opts.ForReach().String())
}

// String formats the ID. Parse(id.String()) returns id.
func (id ID) String() string {
	opts := escape(id.Options)
	if id.OptionsRef != "" {
		opts = "@" + id.OptionsRef
		if id.Options != "" {
			opts += "," + escape(id.Options)
		}
	}
	if id.Name != "" {
		p := namedPrefix
		if id.Snapshot {
			p = namedSnapPrefix
		}
		return strings.Join([]string{p, id.Name, id.Key + "." + id.Token, opts}, sep)
	}
	p := prefix
	if id.Snapshot {
		p = snapPrefix
	}
	return strings.Join([]string{p, escape(id.Export.Server), escape(id.Export.Share),
		id.Key + "." + id.Token, opts}, sep)
}

// Parse parses an nfsdir volume ID. It returns ErrNotNative (wrapped) for
// strings that are not nfsdir IDs at all, and a descriptive error for IDs
// that are malformed. It accepts only the canonical spelling, so every ID
// names exactly one volume.
func Parse(s string) (ID, error) { return parse(s, false) }

// ParseSnapshot parses an nfsdir snapshot ID as Parse does a volume ID.
func ParseSnapshot(s string) (ID, error) { return parse(s, true) }

func parse(s string, snapshot bool) (ID, error) {
	p, named := prefix, namedPrefix
	if snapshot {
		p, named = snapPrefix, namedSnapPrefix
	}
	want := 5
	switch {
	case strings.HasPrefix(s, p+sep):
	case strings.HasPrefix(s, named+sep):
		want = 4
	default:
		return ID{}, fmt.Errorf("%w: %q", ErrNotNative, truncate(s))
	}
	if len(s) > MaxLen {
		return ID{}, fmt.Errorf("ID is %d bytes long; at most %d", len(s), MaxLen)
	}
	var id ID
	f := strings.Split(s, sep)
	if len(f) != want {
		return ID{}, fmt.Errorf("volume ID %q has %d fields, want %d", s, len(f), want)
	}
	if len(f) == 4 {
		if err := export.CheckName(f[1]); err != nil {
			return ID{}, fmt.Errorf("volume ID %q: %v", s, err)
		}
		// The same fields as version 1 from here on: [prefix, name,
		// "", key.token, options].
		id.Name, f = f[1], []string{f[0], f[1], "", f[2], f[3]}
	} else {
		server, err1 := unescape(f[1])
		share, err2 := unescape(f[2])
		if err := errors.Join(err1, err2); err != nil {
			return ID{}, fmt.Errorf("volume ID %q: %v", s, err)
		}
		e, err := export.New(server, share)
		if err != nil {
			return ID{}, fmt.Errorf("volume ID %q: %v", s, err)
		}
		id.Export = e
	}
	key, token, ok := strings.Cut(f[3], ".")
	if !ok || !ValidKey(key, token) {
		return ID{}, fmt.Errorf("volume ID %q: malformed key", s)
	}
	id.Key, id.Token, id.Snapshot = key, token, snapshot
	var err error
	if ref, ok := strings.CutPrefix(f[4], "@"); ok {
		ref, reach, _ := strings.Cut(ref, ",")
		if !isHex(ref, refLen) {
			return ID{}, fmt.Errorf("volume ID %q: malformed options reference", s)
		}
		id.OptionsRef = ref
		if id.Options, err = unescape(reach); err != nil {
			return ID{}, fmt.Errorf("volume ID %q: %v", s, err)
		}
	} else if id.Options, err = unescape(f[4]); err != nil {
		return ID{}, fmt.Errorf("volume ID %q: %v", s, err)
	}
	if id.String() != s {
		return ID{}, fmt.Errorf("volume ID %q is not in canonical form", s)
	}
	return id, nil
}

// escape percent-encodes '%', the separator and bytes outside printable
// ASCII.
func escape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || c == '%' || c == '|' {
			fmt.Fprintf(&b, "%%%02X", c)
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

func unescape(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", fmt.Errorf("truncated escape in %q", s)
		}
		v, err := hex.DecodeString(s[i+1 : i+3])
		if err != nil {
			return "", fmt.Errorf("bad escape in %q", s)
		}
		b.WriteByte(v[0])
		i += 2
	}
	return b.String(), nil
}

func isBase32(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '2' && r <= '7') {
			return false
		}
	}
	return true
}

func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for _, r := range s {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') {
			return false
		}
	}
	return true
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// Legacy is a volume ID in kubernetes-csi/csi-driver-nfs's form
// "server#share#subDir#uuid#onDelete" (share without its leading "/").
// nfsdir publishes such volumes on the node but never deletes them.
type Legacy struct {
	Export   export.Export
	SubDir   string // relative to the share; "" is the share itself
	UUID     string
	OnDelete string
}

// ParseLegacy parses a csi-driver-nfs volume ID.
func ParseLegacy(s string) (Legacy, error) {
	f := strings.Split(s, "#")
	if len(f) < 3 || len(f) > 5 {
		return Legacy{}, fmt.Errorf("%q is not a csi-driver-nfs volume ID (server#share#subDir[#uuid[#onDelete]])", truncate(s))
	}
	e, err := export.New(f[0], "/"+strings.TrimPrefix(f[1], "/"))
	if err != nil {
		return Legacy{}, fmt.Errorf("csi-driver-nfs volume ID %q: %v", truncate(s), err)
	}
	l := Legacy{Export: e, SubDir: strings.Trim(f[2], "/")}
	if err := safepath.CheckStaticPath(l.SubDir); err != nil {
		return Legacy{}, fmt.Errorf("csi-driver-nfs volume ID %q: subDir %v", truncate(s), err)
	}
	if len(f) > 3 {
		l.UUID = f[3]
	}
	if len(f) > 4 {
		l.OnDelete = f[4]
	}
	return l, nil
}

// LegacySnapshot is a snapshot ID in csi-driver-nfs's form
// "server#share#name#name#srcSubDir": its snapshot is the archive
// <share>/<name>/<srcSubDir>.tar.gz (share without its leading "/").
// nfsdir restores such a snapshot into a new volume, and never deletes it.
type LegacySnapshot struct {
	Export  export.Export
	Archive string // the archive's path, relative to the share
}

// ParseLegacySnapshot parses a csi-driver-nfs snapshot ID. The archive's
// path must be a clean relative path (no "..", no empty segments).
func ParseLegacySnapshot(s string) (LegacySnapshot, error) {
	f := strings.Split(s, "#")
	if len(f) != 5 || f[2] == "" || f[4] == "" {
		return LegacySnapshot{}, fmt.Errorf("%q is not a csi-driver-nfs snapshot ID (server#share#name#name#srcSubDir)", truncate(s))
	}
	e, err := export.New(f[0], "/"+strings.TrimPrefix(f[1], "/"))
	if err != nil {
		return LegacySnapshot{}, fmt.Errorf("csi-driver-nfs snapshot ID %q: %v", truncate(s), err)
	}
	archive := f[2] + "/" + strings.Trim(f[4], "/") + ".tar.gz"
	if err := safepath.CheckStaticPath(archive); err != nil {
		return LegacySnapshot{}, fmt.Errorf("csi-driver-nfs snapshot ID %q: archive %v", truncate(s), err)
	}
	return LegacySnapshot{Export: e, Archive: archive}, nil
}

// ValidKey reports whether key and token have the form of a record's key
// and creation token (what Parse accepts in an ID).
func ValidKey(key, token string) bool { return isBase32(key, keyLen) && isBase32(token, tokenLen) }
