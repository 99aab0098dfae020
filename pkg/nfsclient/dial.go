package nfsclient

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"syscall"
)

// Reserved ports a client may connect from, as Linux's NFS client uses
// them (sunrpc's min_resvport and max_resvport).
const (
	minReserved = 665
	maxReserved = 1023
)

// dialReserved connects to addr from a reserved port (below 1024), which
// the Linux NFS server asks of clients unless an export says "insecure",
// trying the ports from a random one on; without the privilege to bind
// one (not root, no CAP_NET_BIND_SERVICE), from any port.
func dialReserved(ctx context.Context, network, addr string) (net.Conn, error) {
	n := maxReserved - minReserved + 1
	start := rand.IntN(n)
	for i := range n {
		port := minReserved + (start+i)%n
		d := net.Dialer{LocalAddr: &net.TCPAddr{Port: port}}
		c, err := d.DialContext(ctx, network, addr)
		switch {
		case err == nil:
			return c, nil
		case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
			var any net.Dialer
			return any.DialContext(ctx, network, addr)
		case errors.Is(err, syscall.EADDRINUSE), errors.Is(err, syscall.EADDRNOTAVAIL):
			continue
		default:
			return nil, err
		}
	}
	return nil, errors.New("no reserved port is free to connect from")
}
