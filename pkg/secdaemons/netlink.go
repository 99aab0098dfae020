package secdaemons

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// netlinkGeneric is NETLINK_GENERIC, the protocol of generic netlink
// families such as the kernel's "handshake".
const netlinkGeneric = unix.NETLINK_GENERIC

// The netlink_diag request and answer (linux/netlink_diag.h), which x/sys
// does not define.
const (
	netlinkDiagGroups = 1   // NETLINK_DIAG_GROUPS: the socket's groups, a bitmap
	ndiagShowGroups   = 0x2 // NDIAG_SHOW_GROUPS
	diagReqLen        = 24  // struct netlink_diag_req
	diagMsgLen        = 28  // struct netlink_diag_msg
)

// askTimeout bounds each answer the kernel gives on a netlink socket.
const askTimeout = 5 * time.Second

// kernelNetlink asks the running kernel.
type kernelNetlink struct{}

// groups returns the multicast groups of the generic netlink family by
// name; ok is false when the kernel has no such family.
func (kernelNetlink) groups(family string) (map[string]uint32, bool, error) {
	req := genlRequest(unix.GENL_ID_CTRL, unix.CTRL_CMD_GETFAMILY, unix.CTRL_ATTR_FAMILY_NAME, family)
	msgs, err := ask(unix.NETLINK_GENERIC, req)
	if errors.Is(err, unix.ENOENT) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	for _, m := range msgs {
		if g, ok := familyGroups(m); ok {
			return g, true, nil
		}
	}
	return nil, false, fmt.Errorf("the kernel's answer names no family %q", family)
}

// listened reports whether a netlink socket of the protocol, in this
// network namespace, is subscribed to the group: the kernel's sock_diag
// lists every socket's groups. Where that is not built in, /proc/net/netlink
// shows the first 32 groups of each socket.
func (kernelNetlink) listened(protocol int, group uint32) (bool, error) {
	req := make([]byte, unix.NLMSG_HDRLEN+diagReqLen)
	putHeader(req, unix.SOCK_DIAG_BY_FAMILY, unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	body := req[unix.NLMSG_HDRLEN:]
	body[0], body[1] = unix.AF_NETLINK, byte(protocol)
	binary.NativeEndian.PutUint32(body[8:], ndiagShowGroups)
	msgs, err := ask(unix.NETLINK_SOCK_DIAG, req)
	if err != nil {
		if on, perr := listenedInProc("/proc/net/netlink", protocol, group); perr == nil {
			return on, nil
		}
		return false, err
	}
	for _, m := range msgs {
		if subscribed(m, protocol, group) {
			return true, nil
		}
	}
	return false, nil
}

// genlRequest builds a generic netlink request with one string attribute.
func genlRequest(family uint16, cmd uint8, attr uint16, value string) []byte {
	v := append([]byte(value), 0)
	attrLen := unix.SizeofNlAttr + len(v)
	msg := make([]byte, unix.NLMSG_HDRLEN+unix.GENL_HDRLEN+align(attrLen))
	putHeader(msg, family, unix.NLM_F_REQUEST)
	msg[unix.NLMSG_HDRLEN] = cmd
	msg[unix.NLMSG_HDRLEN+1] = 1 // version
	a := msg[unix.NLMSG_HDRLEN+unix.GENL_HDRLEN:]
	binary.NativeEndian.PutUint16(a[0:], uint16(attrLen))
	binary.NativeEndian.PutUint16(a[2:], attr)
	copy(a[unix.SizeofNlAttr:], v)
	return msg
}

func putHeader(msg []byte, typ uint16, flags uint16) {
	binary.NativeEndian.PutUint32(msg[0:], uint32(len(msg)))
	binary.NativeEndian.PutUint16(msg[4:], typ)
	binary.NativeEndian.PutUint16(msg[6:], flags)
	binary.NativeEndian.PutUint32(msg[8:], 1) // sequence
}

func align(n int) int { return (n + unix.NLA_ALIGNTO - 1) &^ (unix.NLA_ALIGNTO - 1) }

// ask sends one request on a new netlink socket of the protocol and
// returns the messages of its answer, up to the end of a dump; an error
// message of the kernel is returned as its errno.
func ask(protocol int, req []byte) ([]message, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, protocol)
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	defer unix.Close(fd)
	tv := unix.NsecToTimeval(askTimeout.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return nil, os.NewSyscallError("setsockopt", err)
	}
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, os.NewSyscallError("sendto", err)
	}
	var out []message
	buf := make([]byte, 64<<10)
	for range 4096 { // a dump of every netlink socket of the namespace, in pages
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return nil, os.NewSyscallError("recvfrom", err)
		}
		msgs, done, err := parseAnswer(buf[:n])
		out = append(out, msgs...)
		if err != nil || done {
			return out, err
		}
	}
	return nil, errors.New("the kernel's answer does not end")
}

// parseAnswer splits one read of a netlink socket into its messages; done
// is true at the end of the answer (NLMSG_DONE, or a request that was not
// a dump), err the kernel's error.
func parseAnswer(b []byte) (msgs []message, done bool, err error) {
	all, err := split(b)
	if err != nil {
		return nil, false, err
	}
	for _, m := range all {
		switch m.typ {
		case unix.NLMSG_DONE:
			return msgs, true, nil
		case unix.NLMSG_ERROR:
			if len(m.data) < 4 {
				return msgs, true, errors.New("a short netlink error")
			}
			if errno := -int32(binary.NativeEndian.Uint32(m.data)); errno != 0 {
				return msgs, true, unix.Errno(errno)
			}
			return msgs, true, nil
		}
		msgs = append(msgs, m)
		if m.flags&unix.NLM_F_MULTI == 0 {
			done = true
		}
	}
	return msgs, done, nil
}

// message is one netlink message: its type, flags and payload.
type message struct {
	typ, flags uint16
	data       []byte
}

// split splits what one read of a netlink socket returned into messages.
func split(b []byte) ([]message, error) {
	var out []message
	for len(b) >= unix.NLMSG_HDRLEN {
		l := int(binary.NativeEndian.Uint32(b[0:]))
		if l < unix.NLMSG_HDRLEN || l > len(b) {
			return out, fmt.Errorf("a netlink message of %d bytes in %d", l, len(b))
		}
		out = append(out, message{typ: binary.NativeEndian.Uint16(b[4:]), flags: binary.NativeEndian.Uint16(b[6:]), data: b[unix.NLMSG_HDRLEN:l]})
		if align(l) >= len(b) {
			break
		}
		b = b[align(l):]
	}
	return out, nil
}

// attrs splits netlink attributes; a malformed one ends the list.
func attrs(b []byte) map[uint16][]byte {
	out := map[uint16][]byte{}
	for len(b) >= unix.SizeofNlAttr {
		l := int(binary.NativeEndian.Uint16(b[0:]))
		typ := binary.NativeEndian.Uint16(b[2:]) &^ (unix.NLA_F_NESTED | unix.NLA_F_NET_BYTEORDER)
		if l < unix.SizeofNlAttr || l > len(b) {
			break
		}
		out[typ] = b[unix.SizeofNlAttr:l]
		if align(l) >= len(b) {
			break
		}
		b = b[align(l):]
	}
	return out
}

// familyGroups reads the multicast groups out of a CTRL_CMD_NEWFAMILY
// answer; ok is false for any other message.
func familyGroups(m message) (map[string]uint32, bool) {
	if m.typ != unix.GENL_ID_CTRL || len(m.data) < unix.GENL_HDRLEN {
		return nil, false
	}
	top := attrs(m.data[unix.GENL_HDRLEN:])
	if _, ok := top[unix.CTRL_ATTR_FAMILY_NAME]; !ok {
		return nil, false
	}
	groups := map[string]uint32{}
	for _, g := range attrs(top[unix.CTRL_ATTR_MCAST_GROUPS]) {
		ga := attrs(g)
		name, id := ga[unix.CTRL_ATTR_MCAST_GRP_NAME], ga[unix.CTRL_ATTR_MCAST_GRP_ID]
		if len(id) == 4 {
			groups[strings.TrimRight(string(name), "\x00")] = binary.NativeEndian.Uint32(id)
		}
	}
	return groups, true
}

// subscribed reports whether a sock_diag answer describes a netlink socket
// of the protocol subscribed to the group (groups count from 1; bit g-1
// of the bitmap, in the kernel's unsigned longs).
func subscribed(m message, protocol int, group uint32) bool {
	if m.typ != unix.SOCK_DIAG_BY_FAMILY || len(m.data) < diagMsgLen || group == 0 {
		return false
	}
	if m.data[0] != unix.AF_NETLINK || int(m.data[2]) != protocol {
		return false
	}
	bitmap := attrs(m.data[diagMsgLen:])[netlinkDiagGroups]
	return hasBit(bitmap, group-1)
}

// hasBit reads bit i of a bitmap of native-endian unsigned longs.
func hasBit(bitmap []byte, i uint32) bool {
	word := int(i / 64)
	if (word+1)*8 > len(bitmap) {
		return false
	}
	return binary.NativeEndian.Uint64(bitmap[word*8:])&(1<<(i%64)) != 0
}

// listenedInProc reads /proc/net/netlink: a line per socket, its protocol
// in the second column and the first 32 of its groups, in hex, in the
// fourth. Groups beyond 32 cannot be told there.
func listenedInProc(path string, protocol int, group uint32) (bool, error) {
	if group == 0 || group > 32 {
		return false, fmt.Errorf("group %d cannot be read in %s", group, path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return false, err
	}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 4 || f[1] != strconv.Itoa(protocol) {
			continue
		}
		if g, err := strconv.ParseUint(f[3], 16, 32); err == nil && g&(1<<(group-1)) != 0 {
			return true, nil
		}
	}
	return false, nil
}
