package mounttable

import (
	"strconv"
	"strings"
)

// OpStats is what the kernel's NFS client counts of one NFS operation on
// one mount (the "per-op statistics" of /proc/*/mountstats): how many were
// sent, and the milliseconds they spent queued, on the wire and server
// (round trip) and in all (execute: from queueing until the reply was
// processed), summed over all of them.
type OpStats struct {
	Ops           uint64 // operations sent
	Transmissions uint64 // RPC transmissions (retransmissions included)
	MajorTimeouts uint64
	BytesSent     uint64
	BytesReceived uint64
	QueueMillis   uint64
	RTTMillis     uint64
	ExecuteMillis uint64
	Errors        uint64 // replies with an error status (statvers 1.1 and later)
}

// Add adds o's counts to s.
func (s *OpStats) Add(o OpStats) {
	s.Ops += o.Ops
	s.Transmissions += o.Transmissions
	s.MajorTimeouts += o.MajorTimeouts
	s.BytesSent += o.BytesSent
	s.BytesReceived += o.BytesReceived
	s.QueueMillis += o.QueueMillis
	s.RTTMillis += o.RTTMillis
	s.ExecuteMillis += o.ExecuteMillis
	s.Errors += o.Errors
}

// MaxOpsPerMount bounds the operation names ParseStats keeps for one mount
// (the kernel's NFSv4 client lists about 60); further names are dropped.
const MaxOpsPerMount = 128

// ParseStats decodes the text of /proc/*/mountstats: for each NFS mount
// (fstype nfs or nfs4) whose decoded mount point keep accepts, the
// operations the client sent through it, by name ("LOOKUP", "SYMLINK").
// Operations never sent are left out. A mount point listed twice (one
// mount on top of another) sums both. Lines it does not understand are
// skipped.
func ParseStats(text string, keep func(mountPoint string) bool) map[string]map[string]OpStats {
	out := map[string]map[string]OpStats{}
	var cur map[string]OpStats // the operations of the mount being read; nil: skipped
	perOp := false
	for len(text) > 0 {
		line := text
		if i := strings.IndexByte(text, '\n'); i >= 0 {
			line, text = text[:i], text[i+1:]
		} else {
			text = ""
		}
		f := strings.Fields(line)
		switch {
		case len(f) > 0 && f[0] == "device" && !strings.HasPrefix(line, " ") && !strings.HasPrefix(line, "\t"):
			// device <source> mounted on <mount point> with fstype <type> ...
			cur, perOp = nil, false
			if len(f) < 8 || f[2] != "mounted" || f[3] != "on" || f[5] != "with" || f[6] != "fstype" || (f[7] != "nfs" && f[7] != "nfs4") {
				continue
			}
			mp := Unescape(f[4])
			if !keep(mp) {
				continue
			}
			if out[mp] == nil {
				out[mp] = map[string]OpStats{}
			}
			cur = out[mp]
		case cur == nil:
		case len(f) == 2 && f[0] == "per-op" && f[1] == "statistics":
			perOp = true
		case perOp && len(f) >= 9 && strings.HasSuffix(f[0], ":") && len(f[0]) > 1:
			st, ok := opLine(f[1:])
			name := strings.TrimSuffix(f[0], ":")
			if _, seen := cur[name]; !ok || st.Ops == 0 || (!seen && len(cur) >= MaxOpsPerMount) {
				continue
			}
			sum := cur[name]
			sum.Add(st)
			cur[name] = sum
		}
	}
	for mp, ops := range out {
		if len(ops) == 0 {
			delete(out, mp)
		}
	}
	return out
}

// opLine decodes the numbers of a per-op line: ops, transmissions, major
// timeouts, bytes sent, bytes received, queue, RTT and execute
// milliseconds, and errors where the kernel writes them.
func opLine(f []string) (OpStats, bool) {
	var n [9]uint64
	for i := 0; i < len(n) && i < len(f); i++ {
		v, err := strconv.ParseUint(f[i], 10, 64)
		if err != nil {
			return OpStats{}, false
		}
		n[i] = v
	}
	return OpStats{Ops: n[0], Transmissions: n[1], MajorTimeouts: n[2], BytesSent: n[3], BytesReceived: n[4],
		QueueMillis: n[5], RTTMillis: n[6], ExecuteMillis: n[7], Errors: n[8]}, true
}
