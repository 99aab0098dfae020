package k8s

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// listenersOffLoopback returns the TCP sockets that process pid listens
// on at an address other than loopback, as "address:port" (hex, as
// /proc/net/tcp has them).
func listenersOffLoopback(pid int) ([]string, error) {
	inodes := map[string]bool{}
	fds, err := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
	if err != nil {
		return nil, err
	}
	for _, fd := range fds {
		if l, err := os.Readlink(fd); err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	var off []string
	for _, table := range []string{"tcp", "tcp6"} {
		f, err := os.Open(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			local, inode, listening := parseTCPLine(sc.Text())
			if listening && inodes[inode] && !loopbackHex(local) {
				off = append(off, local)
			}
		}
		f.Close()
	}
	return off, nil
}

// parseTCPLine reads a line of /proc/net/tcp or tcp6: the local address,
// the socket's inode and whether it listens (state 0A).
func parseTCPLine(line string) (local, inode string, listening bool) {
	f := strings.Fields(line)
	if len(f) < 10 || f[0] == "sl" {
		return "", "", false
	}
	return f[1], f[9], f[3] == "0A"
}

// loopbackHex tells whether a /proc/net/tcp local address ("0100007F:1F90",
// IPv4 in the host's byte order; 32 hex digits for IPv6) is on loopback:
// 127.0.0.0/8, ::1, or ::ffff:127.0.0.0/104.
func loopbackHex(addr string) bool {
	ip, _, _ := strings.Cut(addr, ":")
	switch len(ip) {
	case 8:
		return strings.HasSuffix(ip, "7F")
	case 32:
		return ip == "00000000000000000000000001000000" || (strings.HasPrefix(ip, "0000000000000000FFFF0000") && strings.HasSuffix(ip, "7F"))
	}
	return false
}

func TestLoopbackAddressesOfProcNetTCP(t *testing.T) {
	for addr, want := range map[string]bool{
		"0100007F:1F90":                         true,  // 127.0.0.1:8080
		"0101007F:0050":                         true,  // 127.0.1.1
		"00000000:2829":                         false, // 0.0.0.0:10281
		"0A02000A:0050":                         false, // 10.0.2.10
		"00000000000000000000000001000000:0050": true,  // ::1
		"00000000000000000000000000000000:2829": false, // ::
		"0000000000000000FFFF00000100007F:0050": true,  // ::ffff:127.0.0.1
	} {
		if got := loopbackHex(addr); got != want {
			t.Errorf("loopbackHex(%s) = %v, want %v", addr, got, want)
		}
	}
	local, inode, listening := parseTCPLine("   1: 0100007F:A0F1 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 123456 1 0000000000000000 100 0 0 10 0")
	if local != "0100007F:A0F1" || inode != "123456" || !listening {
		t.Errorf("parseTCPLine: %q %q %v", local, inode, listening)
	}
}

// checkHostListeners fails the test when a program of the host's control
// plane listens on an address other than loopback.
func (c *cluster) checkHostListeners() {
	for name, pid := range c.pids {
		off, err := listenersOffLoopback(pid)
		if err != nil {
			continue // ended already
		}
		if len(off) > 0 {
			c.t.Errorf("%s listens off loopback: %v", name, off)
		}
	}
}
