// Package export describes an NFS export: a server and the path it exports
// (the share). It validates both and builds mount sources, putting IPv6
// literals in brackets.
package export

import (
	"fmt"
	"net/netip"
	"path"
	"strings"
)

// Export is a validated NFS server and share. Server is a host name or an IP
// literal (IPv6 without brackets); Share is a clean absolute path.
type Export struct {
	Server string
	Share  string
}

// New validates server and share and returns the normalised export: IPv6
// brackets removed, share cleaned ("/srv/nfs/" becomes "/srv/nfs").
func New(server, share string) (Export, error) {
	s, err := normaliseServer(server)
	if err != nil {
		return Export{}, err
	}
	sh, err := normaliseShare(share)
	if err != nil {
		return Export{}, err
	}
	return Export{Server: s, Share: sh}, nil
}

func normaliseServer(server string) (string, error) {
	if server == "" {
		return "", fmt.Errorf(`parameter "server" is required`)
	}
	if strings.HasPrefix(server, "[") && strings.HasSuffix(server, "]") {
		server = server[1 : len(server)-1]
		if a, err := netip.ParseAddr(server); err != nil || !a.Is6() {
			return "", fmt.Errorf(`parameter "server" %q: brackets must hold an IPv6 address`, "["+server+"]")
		}
	}
	if strings.Contains(server, ":") {
		a, err := netip.ParseAddr(server)
		if err != nil || !a.Is6() {
			return "", fmt.Errorf(`parameter "server" %q is neither a host name nor an IP address`, server)
		}
		if a.Zone() != "" {
			return "", fmt.Errorf(`parameter "server" %q: IPv6 zones are not supported`, server)
		}
		return a.String(), nil
	}
	if len(server) > 253 {
		return "", fmt.Errorf(`parameter "server" is %d bytes long; a host name has at most 253`, len(server))
	}
	for _, label := range strings.Split(server, ".") {
		if label == "" || len(label) > 63 {
			return "", fmt.Errorf(`parameter "server" %q is not a valid host name`, server)
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			// RFC 1123: a label neither starts nor ends with '-'. A leading
			// dash would also reach mount(8) looking like an option.
			return "", fmt.Errorf(`parameter "server" %q: a host name label must not start or end with '-'`, server)
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
				return "", fmt.Errorf(`parameter "server" %q contains %q, which an RFC 1123 host name cannot`, server, r)
			}
		}
	}
	return server, nil
}

func normaliseShare(share string) (string, error) {
	if share == "" {
		return "", fmt.Errorf(`parameter "share" is required`)
	}
	if !strings.HasPrefix(share, "/") {
		return "", fmt.Errorf(`parameter "share" %q must be an absolute path`, share)
	}
	if len(share) > 1024 {
		return "", fmt.Errorf(`parameter "share" is %d bytes long; at most 1024 are allowed`, len(share))
	}
	for _, seg := range strings.Split(share, "/") {
		if seg == "." || seg == ".." {
			return "", fmt.Errorf(`parameter "share" %q must not contain %q segments`, share, seg)
		}
	}
	for _, r := range share {
		if r < 0x20 || r == 0x7f {
			return "", fmt.Errorf(`parameter "share" %q contains a control character`, share)
		}
	}
	return path.Clean(share), nil
}

// Host returns the server as it appears in a mount source: IPv6 literals in
// brackets.
func (e Export) Host() string {
	if strings.Contains(e.Server, ":") {
		return "[" + e.Server + "]"
	}
	return e.Server
}

// Source returns the mount source for dir below the share ("" for the share
// itself), e.g. "[fd00::1]:/srv/nfs/pvc-1". dir must already be validated.
func (e Export) Source(dir string) string {
	return e.Host() + ":" + path.Join(e.Share, dir)
}

// String returns the export as "server:/share".
func (e Export) String() string { return e.Source("") }

// AllowList is a list of exports, each a server and a path prefix, that
// volumes may be mounted from; an entry may allow writing or only reading.
type AllowList []Allowed

// Allowed is one entry of an AllowList.
type Allowed struct {
	Export
	ReadWrite bool
}

// ParseAllowList parses a comma list of "server:/path" (read-only) and
// "server:/path=rw" entries; IPv6 servers in brackets. "" is an empty list.
func ParseAllowList(s string) (AllowList, error) {
	var out AllowList
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		src, mode, _ := strings.Cut(item, "=")
		if mode != "" && mode != "rw" && mode != "ro" {
			return nil, fmt.Errorf("allow-list entry %q: the mode after '=' must be rw or ro", item)
		}
		i := strings.LastIndex(src, ":/")
		if i < 0 {
			return nil, fmt.Errorf("allow-list entry %q must be server:/path", item)
		}
		e, err := New(src[:i], src[i+1:])
		if err != nil {
			return nil, fmt.Errorf("allow-list entry %q: %v", item, err)
		}
		out = append(out, Allowed{Export: e, ReadWrite: mode == "rw"})
	}
	return out, nil
}

// Allows reports whether dir below e's share lies at or below an entry's
// path on the same server, and whether the best such entry allows writing.
func (l AllowList) Allows(e Export, dir string) (ok, readWrite bool) {
	full := path.Join(e.Share, dir)
	for _, a := range l {
		if a.Server != e.Server {
			continue
		}
		if a.Share == "/" || full == a.Share || strings.HasPrefix(full, a.Share+"/") {
			ok = true
			readWrite = readWrite || a.ReadWrite
		}
	}
	return ok, readWrite
}
