// Package mounttable decodes the fields of /proc/*/mountinfo and the NFS
// statistics of /proc/*/mountstats (ParseStats). It does no
// I/O: the kernel escapes a space, tab, newline and backslash in mount
// points and sources, and every comparison against a path nfsdir was given
// must decode them first.
package mounttable

import "strings"

// Unescape decodes the octal escapes (\ooo) the kernel writes in
// /proc/*/mountinfo fields; anything else is kept as written.
func Unescape(field string) string {
	if !strings.Contains(field, "\\") {
		return field
	}
	var b strings.Builder
	for i := 0; i < len(field); i++ {
		if field[i] == '\\' && i+3 < len(field) && isOctal(field[i+1]) && isOctal(field[i+2]) && isOctal(field[i+3]) && field[i+1] <= '3' {
			b.WriteByte((field[i+1]-'0')<<6 | (field[i+2]-'0')<<3 | (field[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(field[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

// SameSource reports whether a mount table source and the source nfsdir
// mounted name the same export path (see SourcePath for why the host is
// not compared).
func SameSource(listed, mounted string) bool {
	p := SourcePath(listed)
	return p != "" && p == SourcePath(mounted)
}

// SourcePath returns the path part of an NFS mount source "host:/path"
// ("[v6]:/path" for IPv6 literals), or "" when source has no host part.
// The kernel shows a superblock's first source for every mount sharing it:
// an NFSv4 mount of "[::1]:/export" that the client finds to be the same
// server as an existing "127.0.0.1:/export" mount is listed with the
// latter, so only the path can be compared.
func SourcePath(source string) string {
	host := source
	if strings.HasPrefix(source, "[") {
		i := strings.Index(source, "]:")
		if i < 0 {
			return ""
		}
		return source[i+2:]
	}
	i := strings.IndexByte(host, ':')
	if i < 0 {
		return ""
	}
	return source[i+1:]
}

// SourceHost returns the host part of an NFS mount source "host:/path"
// ("[v6]:/path" for IPv6 literals, returned without brackets), or "" when
// source has none.
func SourceHost(source string) string {
	if strings.HasPrefix(source, "[") {
		i := strings.Index(source, "]:")
		if i < 0 {
			return ""
		}
		return source[1:i]
	}
	host, _, ok := strings.Cut(source, ":")
	if !ok {
		return ""
	}
	return host
}
