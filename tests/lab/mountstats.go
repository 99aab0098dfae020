package lab

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/nfsdir/nfsdir/pkg/mounttable"
)

// NFSOps returns the NFS operations this process's mount namespace sent
// through the mount at dir (every NFS mount for ""), summed by operation
// name, from /proc/self/mountstats.
func NFSOps(dir string) map[string]int64 {
	ops, _ := NFSTraffic(dir)
	return ops
}

// NFSTraffic is NFSOps with the bytes the operations sent and received
// on the wire, all operations together.
func NFSTraffic(dir string) (map[string]int64, int64) {
	ops, wire, _ := nfsStats(dir)
	return ops, wire
}

// NFSExecute returns, by operation name, the milliseconds the client spent
// on the operations sent through the mount at dir (every NFS mount for
// ""), from the moment each was queued until its reply was processed: the
// kernel's "execute" figure in /proc/self/mountstats.
func NFSExecute(dir string) map[string]int64 {
	_, _, ms := nfsStats(dir)
	return ms
}

// nfsStats reads /proc/self/mountstats: operations and execute time in
// milliseconds by name, and bytes on the wire.
func nfsStats(dir string) (map[string]int64, int64, map[string]int64) {
	b, _ := os.ReadFile("/proc/self/mountstats")
	out, exec := map[string]int64{}, map[string]int64{}
	var wire int64
	for _, ops := range mounttable.ParseStats(string(b), func(mp string) bool { return dir == "" || mp == dir }) {
		for op, st := range ops {
			out[op] += int64(st.Ops)
			exec[op] += int64(st.ExecuteMillis)
			wire += int64(st.BytesSent + st.BytesReceived)
		}
	}
	return out, wire, exec
}

// NFSCallsWith returns the NFS operations sent so far through the mounts
// of this process's mount namespace whose options (the "opts:" line of
// /proc/self/mountstats) include opt: "lookupcache=none" picks the
// controller's share mounts out of the purge's and the pods'.
func NFSCallsWith(opt string) int64 {
	b, _ := os.ReadFile("/proc/self/mountstats")
	var total int64
	in, ops := false, false
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		switch {
		case strings.HasPrefix(line, "device "):
			in, ops = false, false
		case len(f) > 1 && f[0] == "opts:":
			in = slices.Contains(strings.Split(f[1], ","), opt)
		case in && strings.TrimSpace(line) == "per-op statistics":
			ops = true
		case in && ops && len(f) > 1 && strings.HasSuffix(f[0], ":"):
			var n int64
			fmt.Sscan(f[1], &n)
			total += n
		}
	}
	return total
}

// NFSCalls returns the NFS client calls this machine made so far (all
// mounts, all versions), from /proc/net/rpc/nfs.
func NFSCalls() int64 {
	b, _ := os.ReadFile("/proc/net/rpc/nfs")
	var total int64
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || !strings.HasPrefix(f[0], "proc") {
			continue
		}
		for _, n := range f[2:] {
			var v int64
			fmt.Sscan(n, &v)
			total += v
		}
	}
	return total
}

// ServerCompounds is the number of NFSv4 COMPOUNDs the lab's server has
// run, every client's (the proc4 line of /proc/net/rpc/nfsd: "proc4 2
// <NULL> <COMPOUND>"); -1 when it cannot be read.
func ServerCompounds() int64 {
	b, err := os.ReadFile("/proc/net/rpc/nfsd")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 4 && f[0] == "proc4" {
			if n, err := strconv.ParseInt(f[3], 10, 64); err == nil {
				return n
			}
		}
	}
	return -1
}
