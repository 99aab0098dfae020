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
	b, _ := os.ReadFile("/proc/self/mountstats")
	out := map[string]int64{}
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
			var n int64
			fmt.Sscan(f[1], &n)
			out[strings.TrimSuffix(f[0], ":")] += n
		}
	}
	return out
}
