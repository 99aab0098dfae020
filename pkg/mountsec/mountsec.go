// Package mountsec knows the security an NFS mount asks for with its
// options — the RPC security flavour (`sec=`: sys, krb5, krb5i, krb5p) and
// the transport's (`xprtsec=`: none, tls, mtls, RPC-with-TLS) — what the
// machine that mounts needs for it (rpc.gssd for Kerberos, tlshd for TLS,
// both reached by the kernel through its upcalls), and whether the mount
// the kernel made has it, read back from the mount table: a mount that
// fell back to less than it asked for is an error, never a success.
package mountsec

import (
	"fmt"
	"slices"
	"strings"

	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/mountopts"
)

// Flavor is an RPC security flavour, as sec= names it.
type Flavor string

// The flavours the Linux client mounts with.
const (
	Sys   Flavor = "sys"   // AUTH_SYS: the client's word for the user
	None  Flavor = "none"  // AUTH_NULL
	Krb5  Flavor = "krb5"  // Kerberos authentication
	Krb5i Flavor = "krb5i" // and integrity of every call
	Krb5p Flavor = "krb5p" // and privacy: every call encrypted
)

var flavors = []Flavor{Sys, None, Krb5, Krb5i, Krb5p}

// Kerberos reports whether f needs Kerberos credentials (rpc.gssd).
func (f Flavor) Kerberos() bool { return f == Krb5 || f == Krb5i || f == Krb5p }

// Transport is the transport's security, as xprtsec= names it.
type Transport string

// The transport securities of RPC-with-TLS (RFC 9289).
const (
	Plain Transport = "none" // no TLS
	TLS   Transport = "tls"  // TLS, the server authenticated
	MTLS  Transport = "mtls" // TLS, both sides authenticated
)

// Daemon is a program the kernel calls on the mounting machine.
type Daemon string

// The daemons a secure mount needs.
const (
	// Tlshd makes the TLS handshakes the kernel hands up (ktls-utils).
	Tlshd Daemon = "tlshd"
	// Gssd gets Kerberos credentials for the kernel (nfs-utils).
	Gssd Daemon = "rpc.gssd"
)

// Security is what a mount asks for: any of Flavors (none asked: the
// client's default or what the server offers) and Transport ("" when not
// asked: no TLS).
type Security struct {
	Flavors   []Flavor
	Transport Transport
}

// Asked reads the security o asks for. An unknown flavour or transport
// security, and TLS over anything but TCP, are InvalidArgument errors.
func Asked(o mountopts.Options) (Security, error) {
	var s Security
	proto := "tcp"
	for _, opt := range o {
		name, val, hasVal := strings.Cut(opt, "=")
		switch {
		case name == "sec" && hasVal:
			fl, err := parseFlavors(val)
			if err != nil {
				return Security{}, err
			}
			s.Flavors = fl
		case name == "xprtsec" && hasVal:
			switch t := Transport(val); t {
			case Plain, TLS, MTLS:
				s.Transport = t
			default:
				return Security{}, fault.New(fault.InvalidArgument, "mount option xprtsec=%s: the transport's security is one of none, tls and mtls", val)
			}
		case name == "proto" && hasVal:
			proto = val
		case name == "udp" || name == "rdma":
			proto = name
		case name == "sec" || name == "xprtsec":
			return Security{}, fault.New(fault.InvalidArgument, "mount option %s needs a value", name)
		}
	}
	if s.TLS() && proto != "tcp" && proto != "tcp6" {
		return Security{}, fault.New(fault.InvalidArgument, "mount option xprtsec=%s needs TCP, not proto=%s", s.Transport, proto)
	}
	return s, nil
}

func parseFlavors(val string) ([]Flavor, error) {
	var out []Flavor
	for _, f := range strings.Split(val, ":") {
		fl := Flavor(f)
		if !slices.Contains(flavors, fl) {
			return nil, fault.New(fault.InvalidArgument, "mount option sec=%s: %q is not a security flavour the Linux client mounts with (sys, none, krb5, krb5i, krb5p)", val, f)
		}
		if slices.Contains(out, fl) {
			return nil, fault.New(fault.InvalidArgument, "mount option sec=%s names %s twice", val, f)
		}
		out = append(out, fl)
	}
	return out, nil
}

// TLS reports whether s asks for RPC-with-TLS.
func (s Security) TLS() bool { return s.Transport == TLS || s.Transport == MTLS }

// Kerberos reports whether every flavour s allows needs Kerberos: only
// then does a mount need rpc.gssd to succeed at all.
func (s Security) Kerberos() bool {
	if len(s.Flavors) == 0 {
		return false
	}
	for _, f := range s.Flavors {
		if !f.Kerberos() {
			return false
		}
	}
	return true
}

// Needs returns the daemons a mount with s cannot do without.
func (s Security) Needs() []Daemon {
	var out []Daemon
	if s.TLS() {
		out = append(out, Tlshd)
	}
	if s.Kerberos() {
		out = append(out, Gssd)
	}
	return out
}

// String names s as mount options would: "sec=krb5p,xprtsec=mtls", or
// "default" when s asks for nothing.
func (s Security) String() string {
	var parts []string
	if len(s.Flavors) > 0 {
		names := make([]string, len(s.Flavors))
		for i, f := range s.Flavors {
			names[i] = string(f)
		}
		parts = append(parts, "sec="+strings.Join(names, ":"))
	}
	if s.Transport != "" {
		parts = append(parts, "xprtsec="+string(s.Transport))
	}
	if len(parts) == 0 {
		return "default"
	}
	return strings.Join(parts, ",")
}

// Mount is the security a mount has, as the mount table shows it.
type Mount struct {
	Flavor    Flavor    // "" when the table names none
	Transport Transport // Plain when the table names none
}

// Mounted reads a mount's security from its options in the mount table
// (mount and superblock options): the kernel shows the flavour in use
// (sec=) and, on a TLS transport, xprtsec=tls or xprtsec=mtls.
func Mounted(options []string) Mount {
	m := Mount{Transport: Plain}
	for _, opt := range options {
		name, val, _ := strings.Cut(opt, "=")
		switch name {
		case "sec":
			m.Flavor = Flavor(val)
		case "xprtsec":
			m.Transport = Transport(val)
		}
	}
	return m
}

// String names m as the mount table does.
func (m Mount) String() string {
	flavor := m.Flavor
	if flavor == "" {
		flavor = "(none shown)"
	}
	return fmt.Sprintf("sec=%s,xprtsec=%s", flavor, m.Transport)
}

// Verify checks that the mount m has what s asks for: one of its flavours
// and its transport security. A mount with less (a fallback to sec=sys, a
// transport without TLS) is a FailedPrecondition error that says what the
// mount has; the caller unmounts it.
func (s Security) Verify(m Mount) error {
	if len(s.Flavors) > 0 && !slices.Contains(s.Flavors, m.Flavor) {
		return fault.New(fault.FailedPrecondition, "the kernel mounted with %s where the mount options ask for %s; the mount is refused", m, s)
	}
	if s.Transport != "" && s.Transport != m.Transport {
		return fault.New(fault.FailedPrecondition, "the kernel mounted with %s where the mount options ask for %s; the mount is refused", m, s)
	}
	return nil
}

// Refused says what to check when a server refuses a mount that asks for
// s, or "" when s asks for no security of its own.
func (s Security) Refused() string {
	var parts []string
	if s.TLS() {
		parts = append(parts, "the node's tlshd certificates (its client certificate for xprtsec=mtls, its trust of the server's CA, "+
			"the server's name in the server's certificate: the class must name the server by a name the certificate carries) and the export's xprtsec= option")
	}
	if slices.ContainsFunc(s.Flavors, Flavor.Kerberos) {
		parts = append(parts, "the node's keytab (a principal the realm knows, with the realm's current key), "+
			"rpc.gssd's log and the export's sec= option")
	}
	if len(parts) == 0 {
		return ""
	}
	return "the server refused a mount with " + s.String() + ": check " + strings.Join(parts, "; ")
}
