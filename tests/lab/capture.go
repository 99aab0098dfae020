package lab

import (
	"bytes"
	"encoding/binary"
	"net"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// Capture records the TCP payload of every packet to or from a port on the
// guest's loopback, as a packet capture on the wire would see it, until
// Stop. It keeps at most Limit bytes.
type Capture struct {
	port  uint16
	fd    int
	mu    sync.Mutex
	data  bytes.Buffer
	seen  int64
	done  chan struct{}
	quit  chan struct{}
	once  sync.Once
	limit int
}

// StartCapture opens a packet socket on lo for TCP port port.
func StartCapture(t testing.TB, port uint16, limit int) *Capture {
	t.Helper()
	proto := int(htons(unix.ETH_P_ALL))
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		t.Fatalf("packet socket: %v", err)
	}
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: lo.Index}); err != nil {
		unix.Close(fd)
		t.Fatalf("bind packet socket to lo: %v", err)
	}
	// The kernel queues what the reader has not taken yet, up to this.
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 64<<20); err != nil {
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 64<<20)
	}
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 100000})
	c := &Capture{port: port, fd: fd, done: make(chan struct{}), quit: make(chan struct{}), limit: limit}
	go c.read()
	t.Cleanup(c.end)
	return c
}

func (c *Capture) read() {
	defer close(c.done)
	buf := make([]byte, 1<<18) // loopback frames reach 64 KiB of IP and more
	for {
		n, from, err := unix.Recvfrom(c.fd, buf, 0)
		if err != nil {
			// The receive timeout: the queue is drained. Stop now if asked.
			select {
			case <-c.quit:
				return
			default:
				continue
			}
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue // each loopback packet is seen leaving and arriving: keep one
		}
		if payload, ok := TCPPayload(buf[:n], c.port); ok && len(payload) > 0 {
			c.mu.Lock()
			c.seen += int64(len(payload))
			if c.data.Len()+len(payload) <= c.limit {
				c.data.Write(payload)
			}
			c.mu.Unlock()
		}
	}
}

func (c *Capture) end() {
	c.once.Do(func() {
		close(c.quit)
		<-c.done
		unix.Close(c.fd)
	})
}

// Stop ends the capture and returns the payload it kept and how many bytes
// of payload it saw.
func (c *Capture) Stop() ([]byte, int64) {
	c.end()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.data.Bytes(), c.seen
}

// TCPPayload returns the TCP payload of an Ethernet frame (loopback frames
// carry an Ethernet header of zeros) of IPv4 or IPv6 to or from port.
func TCPPayload(frame []byte, port uint16) ([]byte, bool) {
	if len(frame) < 14 {
		return nil, false
	}
	var tcp []byte
	switch binary.BigEndian.Uint16(frame[12:14]) {
	case unix.ETH_P_IP:
		ip := frame[14:]
		if len(ip) < 20 || ip[9] != unix.IPPROTO_TCP {
			return nil, false
		}
		ihl := int(ip[0]&0x0f) * 4
		total := int(binary.BigEndian.Uint16(ip[2:4]))
		if ihl < 20 || total < ihl || total > len(ip) {
			return nil, false
		}
		tcp = ip[ihl:total]
	case unix.ETH_P_IPV6:
		ip := frame[14:]
		if len(ip) < 40 || ip[6] != unix.IPPROTO_TCP {
			return nil, false
		}
		plen := int(binary.BigEndian.Uint16(ip[4:6]))
		if 40+plen > len(ip) {
			return nil, false
		}
		tcp = ip[40 : 40+plen]
	default:
		return nil, false
	}
	if len(tcp) < 20 {
		return nil, false
	}
	src, dst := binary.BigEndian.Uint16(tcp[0:2]), binary.BigEndian.Uint16(tcp[2:4])
	off := int(tcp[12]>>4) * 4
	if src != port && dst != port || off < 20 || off > len(tcp) {
		return nil, false
	}
	return tcp[off:], true
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
