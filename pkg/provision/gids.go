package provision

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/gidrange"
	"github.com/nfsdir/nfsdir/pkg/safepath"
)

// gidsName is the directory of .nfsdir that holds the GIDs of StorageClass
// ranges that volumes hold: a file per GID, named by it, made exclusively
// (so two controllers never hand out one GID) and holding the key, token
// and name of the volume's record.
const gidsName = "gids"

// GIDs is the room of an Area that hands out the GIDs of StorageClass
// ranges (gidRangeStart, gidRangeEnd): each volume one that no live volume
// of the share holds, given back when the volume is deleted.
type GIDs struct{ a *Area }

// gidsOf returns the GID claims of a's share.
func gidsOf(a *Area) GIDs { return GIDs{a} }

func (g GIDs) dir(create bool) (*os.Root, error) {
	return g.a.lazyMetaDir(gidsName, &g.a.gids, create)
}

// gidClaim is a GID a Create holds: fresh when this call claimed it (and
// gives it back unless its record holds it).
type gidClaim struct {
	g          GIDs
	gid        int
	fresh      bool
	key, token string
}

func claimText(key, token, name string) string { return key + " " + token + " " + name + "\n" }

// give gives the new volume rec of req, when its class has a GID range,
// a GID of it (forCreate), in rec and req: the directory's group, with
// the setgid bit. Without a range it claims nothing.
func (g GIDs) give(req *Request, rec *Record) (gidClaim, error) {
	if req.GIDRange.None() {
		return gidClaim{}, nil
	}
	c, err := g.forCreate(*req, rec.Key(), rec.Token)
	if err != nil {
		return c, err
	}
	rec.GID, rec.Mode, rec.GIDFromRange = c.gid, rec.Mode|0o2000, true
	req.GID, req.Mode = rec.GID, rec.Mode
	return c, nil
}

// forCreate is the GID of the new volume rec of req: the record's own, on
// a retry that finds it; otherwise a free GID of the range, claimed.
// ResourceExhausted when every GID of the range is held.
func (g GIDs) forCreate(req Request, key, token string) (gidClaim, error) {
	if old, err := readRecord(g.a.records(), key); err != nil {
		return gidClaim{}, err
	} else if old != nil && old.Name == req.Name && old.GIDFromRange {
		return gidClaim{gid: old.GID}, nil
	}
	dir, err := g.dir(true)
	if err != nil {
		return gidClaim{}, err
	}
	reclaimed := false
	for attempt := 0; attempt < 16; attempt++ {
		taken, err := g.taken(dir, req.GIDRange)
		if err != nil {
			return gidClaim{}, err
		}
		gid, ok := taken.Pick(req.Name + "/" + strconv.Itoa(attempt))
		if !ok && !reclaimed {
			reclaimed = true
			if g.reclaimAbandoned(dir, req.GIDRange) > 0 {
				continue
			}
		}
		if !ok {
			return gidClaim{}, fault.New(fault.ResourceExhausted, "volume %q: every GID of the StorageClass's range %s is held by a volume of this share (%d); widen gidRangeStart/gidRangeEnd or delete volumes",
				req.Name, req.GIDRange, taken.Len())
		}
		f, err := dir.OpenFile(strconv.Itoa(gid), os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
		if errors.Is(err, fs.ErrExist) {
			continue // another creation took it meanwhile
		}
		if err != nil {
			return gidClaim{}, onShare(err, "claim GID %d in %s", gid, path.Join(safepath.MetaDir, gidsName))
		}
		_, werr := io.WriteString(f, claimText(key, token, req.Name))
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			dir.Remove(strconv.Itoa(gid))
			return gidClaim{}, onShare(werr, "write the claim of GID %d", gid)
		}
		return gidClaim{g: g, gid: gid, fresh: true, key: key, token: token}, nil
	}
	return gidClaim{}, fault.New(fault.Aborted, "volume %q: the GIDs of range %s are being claimed by other creations at the same time; retry", req.Name, req.GIDRange)
}

// taken reads which GIDs of r are claimed, streaming the directory.
func (g GIDs) taken(dir *os.Root, r gidrange.Range) (*gidrange.Taken, error) {
	t := gidrange.NewTaken(r)
	err := eachName(dir, func(name string) {
		if gid, err := strconv.Atoi(name); err == nil {
			t.Add(gid)
		}
	})
	if err != nil {
		return nil, onShare(err, "list %s", path.Join(safepath.MetaDir, gidsName))
	}
	return t, nil
}

// eachName calls fn with each name of dir, a thousand names at a time.
func eachName(dir *os.Root, fn func(string)) error {
	d, err := dir.Open(".")
	if err != nil {
		return err
	}
	defer d.Close()
	for {
		names, err := d.Readdirnames(1000)
		for _, n := range names {
			fn(n)
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// reclaimAbandoned removes the claims of r's GIDs that no record holds
// and that are older than AbandonedAfter (a creation cut by a crash and
// never retried), and returns how many.
func (g GIDs) reclaimAbandoned(dir *os.Root, r gidrange.Range) int {
	var candidates []string
	eachName(dir, func(name string) {
		if gid, err := strconv.Atoi(name); err == nil && r.Contains(gid) {
			candidates = append(candidates, name)
		}
	})
	n := 0
	for _, name := range candidates {
		b, st, err := readClaim(dir, name)
		if err != nil || time.Since(st.ModTime()) < AbandonedAfter {
			continue
		}
		f := strings.Fields(string(b))
		if len(f) < 2 {
			continue
		}
		rec, err := readRecord(g.a.records(), f[0])
		if err != nil || (rec != nil && rec.Token == f[1]) {
			continue
		}
		if removeClaimIf(dir, name, string(b)) {
			klog.Warningf("GID %s: its claim by %q was never used by a volume (a creation cut short); it is free again", name, strings.Join(f[2:], " "))
			n++
		}
	}
	return n
}

// readClaim reads a claim file (small: at most 4 KiB is read).
func readClaim(dir *os.Root, name string) ([]byte, fs.FileInfo, error) {
	f, err := dir.OpenFile(name, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		return nil, nil, fmt.Errorf("claim %s is not a regular file", name)
	}
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	return b, st, err
}

// removeClaimIf removes the claim name when it still says want.
func removeClaimIf(dir *os.Root, name, want string) bool {
	b, _, err := readClaim(dir, name)
	if err != nil || string(b) != want {
		return false
	}
	return dir.Remove(name) == nil
}

// release gives back a GID this call claimed (fresh); a retry's GID,
// which its record holds, stays.
func (c gidClaim) release() {
	if !c.fresh {
		return
	}
	c.g.giveBack(c.gid, c.key, c.token)
}

// Release gives back the GID of the deleted volume rec of key and token,
// when it came from a range; a claim that says otherwise stays.
func (g GIDs) Release(rec *Record, key, token string) {
	if rec == nil || !rec.GIDFromRange {
		return
	}
	g.giveBack(rec.GID, key, token)
}

func (g GIDs) giveBack(gid int, key, token string) {
	dir, err := g.dir(false)
	if err != nil {
		klog.Warningf("GID %d: cannot give it back: %v", gid, err)
		return
	}
	name := strconv.Itoa(gid)
	b, _, err := readClaim(dir, name)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err != nil || !strings.HasPrefix(string(b), key+" "+token+" ") {
		klog.Warningf("GID %d: its claim is not this volume's (%q); it stays", gid, strings.TrimSpace(string(b)))
		return
	}
	if !removeClaimIf(dir, name, string(b)) {
		klog.Warningf("GID %d: its claim could not be removed; it stays held", gid)
	}
}
