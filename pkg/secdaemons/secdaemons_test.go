package secdaemons

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/mountsec"
)

// fakeNetlink is a kernel with or without the handshake family, and with
// or without a listener to its tlshd group.
type fakeNetlink struct {
	family   bool
	listener bool
}

func (f fakeNetlink) groups(family string) (map[string]uint32, bool, error) {
	if !f.family || family != "handshake" {
		return nil, false, nil
	}
	return map[string]uint32{"none": 4, "tlshd": 5}, true, nil
}

func (f fakeNetlink) listened(protocol int, group uint32) (bool, error) {
	return f.listener && protocol == unix.NETLINK_GENERIC && group == 5, nil
}

// procWith makes a /proc with one process of the name comm in the
// network namespace netns.
func procWith(t *testing.T, comm, netns string) string {
	root := t.TempDir()
	dir := filepath.Join(root, "4242")
	os.MkdirAll(filepath.Join(dir, "ns"), 0o755)
	os.WriteFile(filepath.Join(dir, "comm"), []byte(comm+"\n"), 0o644)
	if err := os.Symlink(netns, filepath.Join(dir, "ns", "net")); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(root, "self"), 0o755)
	return root
}

func TestCheckTellsWhatIsMissing(t *testing.T) {
	self, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Skip("no /proc/self/ns/net here")
	}
	all := []mountsec.Daemon{mountsec.Tlshd, mountsec.Gssd}
	for _, c := range []struct {
		name  string
		nl    fakeNetlink
		proc  string
		needs []mountsec.Daemon
		want  []string // in the error, in order; none: no error
	}{
		{"nothing needed", fakeNetlink{}, procWith(t, "sleep", self), nil, nil},
		{"an old kernel", fakeNetlink{}, procWith(t, "rpc.gssd", self), all, []string{"no TLS handshake upcall", "Linux 6.5"}},
		{"no tlshd", fakeNetlink{family: true}, procWith(t, "rpc.gssd", self), all, []string{"no tlshd listens", "the host"}},
		{"both there", fakeNetlink{family: true, listener: true}, procWith(t, "rpc.gssd", self), all, nil},
		{"no gssd", fakeNetlink{family: true, listener: true}, procWith(t, "rpc.idmapd", self), all, []string{"no rpc.gssd runs"}},
		{"gssd elsewhere", fakeNetlink{family: true, listener: true}, procWith(t, "rpc.gssd", "net:[1]"), []mountsec.Daemon{mountsec.Gssd}, []string{"no rpc.gssd runs"}},
		{"both missing", fakeNetlink{family: true}, procWith(t, "bash", self), all, []string{"no tlshd listens", "; no rpc.gssd runs"}},
	} {
		s := &System{ProcRoot: c.proc, Where: "the host", netlink: c.nl}
		err := s.Check(context.Background(), c.needs)
		if len(c.want) == 0 {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		if !fault.Is(err, fault.FailedPrecondition) {
			t.Errorf("%s: %v, want FailedPrecondition", c.name, err)
			continue
		}
		rest := err.Error()
		for _, w := range c.want {
			i := strings.Index(rest, w)
			if i < 0 {
				t.Errorf("%s: %q lacks %q", c.name, err, w)
				break
			}
			rest = rest[i+len(w):]
		}
	}
}

// attr encodes one netlink attribute, padded.
func attr(typ uint16, payload []byte) []byte {
	b := make([]byte, align(unix.SizeofNlAttr+len(payload)))
	binary.NativeEndian.PutUint16(b[0:], uint16(unix.SizeofNlAttr+len(payload)))
	binary.NativeEndian.PutUint16(b[2:], typ)
	copy(b[unix.SizeofNlAttr:], payload)
	return b
}

func u32(v uint32) []byte { return binary.NativeEndian.AppendUint32(nil, v) }

func TestFamilyGroupsReadsTheKernelsAnswer(t *testing.T) {
	group := func(name string, id uint32) []byte {
		return append(attr(unix.CTRL_ATTR_MCAST_GRP_NAME, append([]byte(name), 0)), attr(unix.CTRL_ATTR_MCAST_GRP_ID, u32(id))...)
	}
	groups := append(attr(1, group("none", 7)), attr(2, group("tlshd", 9))...)
	data := append([]byte{unix.CTRL_CMD_NEWFAMILY, 1, 0, 0}, attr(unix.CTRL_ATTR_FAMILY_NAME, []byte("handshake\x00"))...)
	data = append(data, attr(unix.CTRL_ATTR_MCAST_GROUPS|unix.NLA_F_NESTED, groups)...)
	got, ok := familyGroups(message{typ: unix.GENL_ID_CTRL, data: data})
	if !ok || got["tlshd"] != 9 || got["none"] != 7 || len(got) != 2 {
		t.Errorf("familyGroups: %v %v", got, ok)
	}
	if _, ok := familyGroups(message{typ: unix.NLMSG_ERROR, data: data}); ok {
		t.Errorf("an error message was read as a family")
	}
}

func TestSubscribedReadsTheGroupBitmap(t *testing.T) {
	diag := func(protocol byte, bitmap []byte) message {
		d := make([]byte, diagMsgLen)
		d[0], d[2] = unix.AF_NETLINK, protocol
		return message{typ: unix.SOCK_DIAG_BY_FAMILY, data: append(d, attr(netlinkDiagGroups, bitmap)...)}
	}
	bitmap := make([]byte, 16)
	binary.NativeEndian.PutUint64(bitmap[8:], 1<<(70-64-1)) // group 70
	m := diag(unix.NETLINK_GENERIC, bitmap)
	if !subscribed(m, unix.NETLINK_GENERIC, 70) || subscribed(m, unix.NETLINK_GENERIC, 69) || subscribed(m, unix.NETLINK_GENERIC, 200) {
		t.Errorf("the bitmap was misread")
	}
	if subscribed(diag(unix.NETLINK_ROUTE, bitmap), unix.NETLINK_GENERIC, 70) || subscribed(m, unix.NETLINK_GENERIC, 0) {
		t.Errorf("another protocol's socket, or group 0, counted")
	}
}

func TestListenedInProcReadsTheFirst32Groups(t *testing.T) {
	p := filepath.Join(t.TempDir(), "netlink")
	os.WriteFile(p, []byte("sk               Eth Pid        Groups   Rmem     Wmem     Dump  Locks    Drops    Inode\n"+
		"0000000000000000 0   1          00000000 0        0        0     2        0        10\n"+
		"0000000000000000 16  2041       00000010 0        0        0     2        0        11\n"), 0o644)
	for group, want := range map[uint32]bool{5: true, 4: false} {
		if got, err := listenedInProc(p, unix.NETLINK_GENERIC, group); err != nil || got != want {
			t.Errorf("group %d: %v %v", group, got, err)
		}
	}
	if _, err := listenedInProc(p, unix.NETLINK_GENERIC, 33); err == nil {
		t.Errorf("group 33 was read from a 32-bit column")
	}
}

// TestTheKernelAnswers asks the kernel this test runs on: its generic
// netlink controller family has the "notify" group, and a socket of this
// test subscribed to it is seen by sock_diag.
func TestTheKernelAnswers(t *testing.T) {
	k := kernelNetlink{}
	groups, ok, err := k.groups("nlctrl")
	if err != nil || !ok || groups["notify"] == 0 {
		t.Fatalf("nlctrl: %v %v %v", groups, ok, err)
	}
	if _, ok, err := k.groups("no-such-family"); ok || err != nil {
		t.Fatalf("a family the kernel lacks: %v %v", ok, err)
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_GENERIC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		t.Fatal(err)
	}
	g := groups["notify"]
	before, err := k.listened(unix.NETLINK_GENERIC, g)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_ADD_MEMBERSHIP, int(g)); err != nil {
		t.Fatal(err)
	}
	after, err := k.listened(unix.NETLINK_GENERIC, g)
	if err != nil || !after {
		t.Errorf("a subscribed socket was not seen: %v %v (before: %v)", after, err, before)
	}
}

// FuzzParse: whatever a netlink socket returns, reading it neither panics
// nor reads past it.
func FuzzParse(f *testing.F) {
	f.Add([]byte{20, 0, 0, 0, 3, 0, 2, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		msgs, _, _ := parseAnswer(b)
		for _, m := range msgs {
			familyGroups(m)
			subscribed(m, unix.NETLINK_GENERIC, 5)
			subscribed(m, unix.NETLINK_GENERIC, 1000)
		}
		attrs(b)
	})
}
