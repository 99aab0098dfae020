package lab

import (
	"fmt"
	"os"
	"strings"
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
	b, _ := os.ReadFile("/proc/self/mountstats")
	out := map[string]int64{}
	var wire int64
	in, ops := false, false
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		switch {
		case strings.HasPrefix(line, "device "):
			in = dir == "" || (len(f) > 4 && f[4] == dir)
			ops = false
		case in && strings.TrimSpace(line) == "per-op statistics":
			ops = true
		case in && ops && len(f) > 1 && strings.HasSuffix(f[0], ":"):
			var n, sent, recv int64
			fmt.Sscan(f[1], &n)
			if len(f) > 5 { // ops trans timeouts bytes_sent bytes_recv ...
				fmt.Sscan(f[4], &sent)
				fmt.Sscan(f[5], &recv)
			}
			out[strings.TrimSuffix(f[0], ":")] += n
			wire += sent + recv
		}
	}
	return out, wire
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
