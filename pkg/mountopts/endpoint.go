package mountopts

import (
	"net"
	"strconv"
	"strings"
)

// SessionEndpoint reads the options the kernel lists for an NFS mount
// (its mount table entry: vers=, proto=, port=, sec=, addr=) and returns
// the host:port where a client of its own can reach the same server
// through an NFSv4.1 session with AUTH_SYS, as the mount does; or "" and
// why not (another version, transport or security flavor).
func SessionEndpoint(kernel []string) (addr, why string) {
	v := map[string]string{}
	for _, o := range kernel {
		if k, val, ok := strings.Cut(o, "="); ok {
			v[k] = val
		}
	}
	switch {
	case v["vers"] != "4.1" && v["vers"] != "4.2":
		return "", "the mount is NFS version " + orNone(v["vers"]) + ", and sessions need 4.1 or 4.2"
	case v["proto"] != "tcp" && v["proto"] != "tcp6":
		return "", "the mount's transport is " + orNone(v["proto"]) + ", not TCP"
	case v["sec"] != "sys":
		return "", "the mount's security flavor is " + orNone(v["sec"]) + ", not sys"
	case net.ParseIP(v["addr"]) == nil:
		return "", "the mount names no server address (addr=)"
	}
	port := "2049"
	if p, err := strconv.ParseUint(v["port"], 10, 16); err == nil && p != 0 {
		port = strconv.FormatUint(p, 10)
	} else if v["port"] != "" && v["port"] != "0" {
		return "", "the mount's port " + v["port"] + " is not a port number"
	}
	return net.JoinHostPort(v["addr"], port), ""
}

func orNone(s string) string {
	if s == "" {
		return "(none listed)"
	}
	return s
}
