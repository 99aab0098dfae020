// Package mounttable decodes the fields of /proc/*/mountinfo. It does no
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
