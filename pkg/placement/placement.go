// Package placement chooses the export of a StorageClass's pool that
// takes a new volume. It is pure: the caller reads each member (its file
// system's space, whether it already holds the volume's directory) and
// passes what it found.
//
// The policy: a member that already holds the volume's record (a retry of
// the same creation, or a directory a claim takes over) takes it, whatever
// its space; otherwise the member with the most available bytes among
// those that are not drained, could be read and are below the fill
// threshold. Members within Slack of the most count as equal, and a hash
// of the volume's name and the member's chooses among them: a burst of
// new volumes spreads evenly over exports of the same room (empty
// directories change no one's space), and the same name gets the same
// member.
package placement

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"strings"
)

// Member is what the caller found of one export of the pool.
type Member struct {
	Name string // the export's name ("" for a class of server and share)
	// Drained members take no new volumes (the class's drainExports).
	Drained bool
	// Err, when set, is why the member could not be read (unreachable,
	// refused): it is skipped.
	Err error
	// Holds is the name of the volume whose record is at the new
	// volume's directory on this member; "": none.
	Holds string
	// UsedBytes and AvailableBytes are its file system's, as statfs
	// gives them.
	UsedBytes, AvailableBytes int64
}

// Policy is the class's limits.
type Policy struct {
	// FillPercent: a member whose file system is this full (used over
	// used plus available, as df counts it) or more takes no new
	// volumes; 0: no limit.
	FillPercent int
}

// Percent is how full m's file system is, rounded up, as df shows it
// (0 to 100; 100 for a file system that reports no size).
func (m Member) Percent() int {
	used, total := float64(max(m.UsedBytes, 0)), float64(max(m.UsedBytes, 0))+float64(max(m.AvailableBytes, 0))
	if total <= 0 {
		return 100
	}
	return int(min(math.Ceil(used*100/total), 100))
}

// Room is how many bytes m can still take under p: its available bytes,
// or those below the fill threshold when that is less; 0 for a member
// that takes no new volumes.
func (p Policy) Room(m Member) int64 {
	if p.skip(m) != "" {
		return 0
	}
	room := m.AvailableBytes
	if p.FillPercent > 0 {
		total := float64(m.UsedBytes) + float64(m.AvailableBytes)
		below := total*float64(p.FillPercent)/100 - float64(m.UsedBytes)
		if below < float64(room) {
			room = int64(below)
		}
	}
	return max(room, 0)
}

// skip says why m takes no new volume; "": it may.
func (p Policy) skip(m Member) string {
	switch {
	case m.Drained:
		return "drained (drainExports)"
	case m.Err != nil:
		return fmt.Sprintf("not reachable: %v", m.Err)
	case m.UsedBytes < 0 || m.AvailableBytes < 0 || m.UsedBytes == 0 && m.AvailableBytes == 0:
		return "its file system reports no size"
	case m.AvailableBytes <= 0:
		return "full"
	}
	if pc := m.Percent(); p.FillPercent > 0 && pc >= p.FillPercent {
		return fmt.Sprintf("%d%% full, at or over fillThreshold %d%%", pc, p.FillPercent)
	}
	return ""
}

// Exhausted is Choose's answer when no member can take the volume: why
// each was skipped.
type Exhausted struct{ Reasons []string }

func (e *Exhausted) Error() string {
	return "no export of the class can take a new volume: " + strings.Join(e.Reasons, "; ")
}

// Ambiguous is Choose's answer when more than one member holds a record
// at the volume's directory: which one is the volume's is not known.
type Ambiguous struct{ Names []string }

func (e *Ambiguous) Error() string {
	return fmt.Sprintf("exports %s each hold a record at the volume's directory: remove or rename the one that is not the volume's", strings.Join(e.Names, " and "))
}

// Slack is the share of the most available bytes by which members may
// differ and still count as equal.
const Slack = 0.05

// Choose returns the index of the member that takes the volume named
// volume, or an *Exhausted or *Ambiguous error.
func Choose(members []Member, p Policy, volume string) (int, error) {
	var holding []int
	for i, m := range members {
		if m.Holds != "" && m.Err == nil {
			holding = append(holding, i)
		}
	}
	switch len(holding) {
	case 0:
	case 1:
		return holding[0], nil
	default:
		amb := &Ambiguous{}
		for _, i := range holding {
			amb.Names = append(amb.Names, label(members[i]))
		}
		return -1, amb
	}
	most := int64(-1)
	var ex Exhausted
	for _, m := range members {
		if why := p.skip(m); why != "" {
			ex.Reasons = append(ex.Reasons, label(m)+": "+why)
			continue
		}
		most = max(most, m.AvailableBytes)
	}
	if most < 0 {
		return -1, &ex
	}
	floor := most - int64(float64(most)*Slack)
	best, bestScore := -1, uint64(0)
	for i, m := range members {
		if p.skip(m) != "" || m.AvailableBytes < floor {
			continue
		}
		if score := Score(volume, m.Name); best < 0 || score > bestScore {
			best, bestScore = i, score
		}
	}
	return best, nil
}

// Score is the hash that ranks member for volume among equals: the first
// 8 bytes of the SHA-256 of both names.
func Score(volume, member string) uint64 {
	h := sha256.New()
	h.Write([]byte(volume))
	h.Write([]byte{0})
	h.Write([]byte(member))
	return binary.BigEndian.Uint64(h.Sum(nil))
}

func label(m Member) string {
	if m.Name == "" {
		return "the export"
	}
	return "export " + m.Name
}
