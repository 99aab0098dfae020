// Package publock keeps volumes that Kubernetes asks for on one node
// (ReadWriteOnce, ReadWriteOncePod, any CSI single-node mode) on one node at a time,
// although NFS itself lets any number of clients mount them and nfsdir has
// no attach step.
//
// A node plugin that publishes such a volume takes its claim: a small file
// in the share's .nfsdir/nodes directory, named after the volume's
// directory and naming the node. While the node keeps the volume published
// it renews the claim by touching the file (its mtime, set by the server's
// clock); a claim not renewed for the lapse (the node died, or it lost the
// volume without saying so) is free again. Another node's publish of a
// volume whose claim is live is refused; one whose claim lapsed takes it
// over. Taking, renewing and dropping a claim happen under an NFS lock on
// the claim file, so two nodes can never both take it.
//
// This file holds the pure part: names and the claim's format.
package publock

import (
	"crypto/sha256"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"
	"unicode/utf8"
)

// Dir is the directory of claims below a share's metadata directory.
const Dir = "nodes"

// maxClaim bounds what is read of a claim file.
const maxClaim = 4096

var b32 = base32.StdEncoding.WithPadding(base32.NoPadding)

func hashed(prefix, domain, s string) string {
	sum := sha256.Sum256([]byte(domain + "\x00" + s))
	return prefix + strings.ToLower(b32.EncodeToString(sum[:])[:20])
}

// Name is the claim file of the volume whose directory is subDir below the
// share: the same directory gives the same name however it is spelled
// ("a/b", "/a//b/").
func Name(subDir string) string {
	return hashed("v-", "nfsdir-claim", path.Clean("/"+subDir))
}

// ClockName is the file a node touches to read the server's clock.
func ClockName(node string) string {
	return hashed("c-", "nfsdir-clock", node)
}

// Claim is what a claim file says: which node holds the volume, and which
// volume it is (for the operator reading it).
type Claim struct {
	Node   string `json:"node"`
	Volume string `json:"volume,omitempty"`
}

// Free reports whether the claim names no node.
func (c Claim) Free() bool { return c.Node == "" }

// Marshal returns the claim's file content.
func (c Claim) Marshal() []byte {
	b, _ := json.Marshal(c) // strings only: cannot fail
	return append(b, '\n')
}

// ErrUnreadable says a claim file holds something no node wrote whole.
var ErrUnreadable = errors.New("claim file is not a claim")

// Parse reads a claim file's content. Empty content is a free claim (what
// a node leaves when it drops one); anything that is not a whole claim is
// ErrUnreadable.
func Parse(b []byte) (Claim, error) {
	if len(strings.TrimSpace(string(b))) == 0 {
		return Claim{}, nil
	}
	if len(b) > maxClaim || !utf8.Valid(b) {
		return Claim{}, ErrUnreadable
	}
	var c Claim
	if err := json.Unmarshal(b, &c); err != nil {
		return Claim{}, fmt.Errorf("%w: %v", ErrUnreadable, err)
	}
	if c.Node == "" {
		return Claim{}, fmt.Errorf("%w: it names no node", ErrUnreadable)
	}
	return c, nil
}

// HeldError says another node holds a live claim on the volume.
type HeldError struct {
	Claim Claim
	Name  string // the claim file, below the share's .nfsdir/nodes
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("node %q has it published (its claim .nfsdir/%s/%s is renewed while it keeps the volume mounted, and lapses otherwise)", e.Claim.Node, Dir, e.Name)
}
