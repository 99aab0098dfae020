package lab

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// waitReady polls ready until it holds, failing the test when the daemon
// ends first or 15 s pass: a daemon is used only once it serves, never
// after a guessed delay.
func (d *Daemon) waitReady(t testing.TB, what string, ready func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !ready() {
		if !d.Running() {
			t.Fatalf("%s ended before %s:\n%s", d.Name, what, d.Output())
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not %s within 15 s:\n%s", d.Name, what, d.Output())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Pid is the daemon's process ID.
func (d *Daemon) Pid() int { return d.cmd.Process.Pid }

// openFiles are the targets of pid's open file descriptors.
func openFiles(pid int) []string {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	entries, _ := os.ReadDir(dir)
	var out []string
	for _, e := range entries {
		if target, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil {
			out = append(out, target)
		}
	}
	return out
}

// inGenericNetlinkGroup reports whether pid holds a generic netlink socket
// that has joined a multicast group, as tlshd's does once the kernel's
// handshake upcalls reach it (/proc/net/netlink: Eth 16, Groups non-zero).
func inGenericNetlinkGroup(pid int) bool {
	inodes := map[string]bool{}
	for _, f := range openFiles(pid) {
		if strings.HasPrefix(f, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(f, "socket:["), "]")] = true
		}
	}
	b, err := os.ReadFile("/proc/net/netlink")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		// sk Eth Pid Groups Rmem Wmem Dump Locks Drops Inode
		f := strings.Fields(line)
		if len(f) == 10 && f[1] == "16" && inodes[f[9]] && strings.Trim(f[3], "0") != "" {
			return true
		}
	}
	return false
}

// holdsOpen reports whether pid has a file under dir open.
func holdsOpen(pid int, dir string) bool {
	for _, f := range openFiles(pid) {
		if strings.HasPrefix(f, dir+"/") {
			return true
		}
	}
	return false
}

// listensOn reports whether a socket of the network namespace is bound to
// the local port (UDP) or listens on it (TCP).
func listensOn(port int) bool {
	hex := ":" + strings.ToUpper(strconv.FormatInt(int64(port), 16))
	for len(hex) < 5 {
		hex = ":0" + hex[1:]
	}
	for _, table := range []string{"/proc/net/udp", "/proc/net/udp6", "/proc/net/tcp", "/proc/net/tcp6"} {
		b, _ := os.ReadFile(table)
		for _, line := range strings.Split(string(b), "\n")[1:] {
			// sl local_address rem_address st ...
			f := strings.Fields(line)
			if len(f) > 3 && strings.HasSuffix(f[1], hex) && (strings.Contains(table, "udp") || f[3] == "0A") {
				return true
			}
		}
	}
	return false
}

// WaitTLSHD returns once the daemon (a tlshd, or a command that becomes
// one) listens to the kernel's handshake requests.
func (d *Daemon) WaitTLSHD(t testing.TB) {
	t.Helper()
	d.waitReady(t, "join the kernel's handshake multicast group", func() bool { return inGenericNetlinkGroup(d.Pid()) })
}

// WaitGssd returns once the daemon (an rpc.gssd, or a command that
// becomes one) holds the kernel's gssd pipe of the rpc_pipefs at pipefs
// open, which is when the kernel counts rpc.gssd as running.
func (d *Daemon) WaitGssd(t testing.TB, pipefs string) {
	t.Helper()
	d.waitReady(t, "open the kernel's gssd pipe", func() bool { return holdsOpen(d.Pid(), pipefs+"/gssd") })
}
