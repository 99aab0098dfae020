package serveragent

import (
	"crypto/x509"
	"fmt"
	"slices"
	"strings"
)

// The identities the chart and the agent expect by default: URI subject
// alternative names of the controller's client certificate and of the
// agents' server certificates. A certificate of the right CA without its
// role's identity is refused: a CA shared with other workloads signs
// certificates that must not drive the agent or pose as it.
const (
	DefaultControllerIdentity = "urn:nfsdir:controller"
	DefaultAgentIdentity      = "urn:nfsdir:agent"
)

// Role is what a caller of the agent may do.
type Role int

const (
	// NoRole may not call the agent at all.
	NoRole Role = iota
	// Reader may read quotas, follow copies and probe: Get, CopyProgress,
	// Probe (monitoring, or a second controller standing by).
	Reader
	// Controller may call every method: make and remove volumes, set and
	// clear quotas, run copies.
	Controller
)

func (r Role) String() string {
	return [...]string{"none", "reader", "controller"}[r]
}

// readerMethods are the methods a Reader may call.
var readerMethods = []string{"Get", "CopyProgress", "Probe"}

// MayCall tells whether role may call the agent's method fullMethod
// ("/nfsdir.agent.v1.Agent/Get"), whatever the service's name.
func (r Role) MayCall(fullMethod string) bool {
	switch r {
	case Controller:
		return true
	case Reader:
		i := strings.LastIndexByte(fullMethod, '/')
		return i >= 0 && slices.Contains(readerMethods, fullMethod[i+1:])
	}
	return false
}

// Identities pins certificate identities (URI or DNS subject alternative
// names, exactly as written in the certificate) to the agent's roles.
type Identities struct {
	Controllers, Readers []string
}

// RoleOf is the role of a verified client certificate: the highest of the
// roles pinned to one of its identities, provided it is marked for client
// authentication (an explicit extended key usage: a certificate with none
// is valid for any use to crypto/x509, and is refused here).
func (ids Identities) RoleOf(cert *x509.Certificate) Role {
	if !slices.Contains(cert.ExtKeyUsage, x509.ExtKeyUsageClientAuth) {
		return NoRole
	}
	role := NoRole
	for _, id := range identitiesOf(cert) {
		switch {
		case slices.Contains(ids.Controllers, id):
			return Controller
		case slices.Contains(ids.Readers, id):
			role = Reader
		}
	}
	return role
}

// identitiesOf lists the URI and DNS subject alternative names of cert.
func identitiesOf(cert *x509.Certificate) []string {
	ids := make([]string, 0, len(cert.URIs)+len(cert.DNSNames))
	for _, u := range cert.URIs {
		ids = append(ids, u.String())
	}
	return append(ids, cert.DNSNames...)
}

// checkAgent checks that a verified server certificate is an agent's: marked
// for server authentication explicitly and holding identity.
func checkAgent(cert *x509.Certificate, identity string) error {
	if !slices.Contains(cert.ExtKeyUsage, x509.ExtKeyUsageServerAuth) {
		return fmt.Errorf("the agent's certificate %q is not marked for server authentication (extended key usage serverAuth)", cert.Subject)
	}
	if !slices.Contains(identitiesOf(cert), identity) {
		return fmt.Errorf("the agent's certificate %q does not hold the agents' identity %q (it holds %q)", cert.Subject, identity, identitiesOf(cert))
	}
	return nil
}

// describe names a client certificate in messages: its subject and its
// identities.
func describe(cert *x509.Certificate) string {
	return fmt.Sprintf("%q (identities %q)", cert.Subject, identitiesOf(cert))
}
