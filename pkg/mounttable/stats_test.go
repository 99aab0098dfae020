package mounttable

import (
	"fmt"
	"strings"
	"testing"
	"unicode"
)

// sample is /proc/self/mountstats as Linux 6.1 writes it (trimmed), with a
// controller's share mount, a mount point with a space, a mount of another
// kind and an NFSv3 mount of statvers 1.0 (no errors column).
const sample = `device rootfs mounted on / with fstype rootfs
device proc mounted on /proc with fstype proc
device 10.0.2.2:/export mounted on /var/lib/nfsdir/mounts/0123abcd with fstype nfs4 statvers=1.1
	opts:	rw,vers=4.2,rsize=1048576,wsize=1048576,namlen=255,acregmin=3,lookupcache=none
	age:	57
	caps:	caps=0x3ffbffff,wtmult=512,dtsize=1048576,bsize=0,namlen=255
	events:	3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27
	bytes:	0 0 0 0 0 0 0 0
	RPC iostats version: 1.1  p/v: 100003/4 (nfs)
	xprt:	tcp 0 1 1 0 0 66 66 0 66 0 2 0 0
	per-op statistics
	        NULL: 1 1 0 44 24 0 0 0 0
	        READ: 0 0 0 0 0 0 0 0 0
	      LOOKUP: 12 13 1 2400 3000 1 14 16 3
	     SYMLINK: 2 2 0 500 400 0 3 4 0
device 10.0.2.2:/export mounted on /mnt/a\040b with fstype nfs statvers=1.0
	opts:	rw,vers=3
	per-op statistics
	        NULL: 0 0 0 0 0 0 0 0
	      LOOKUP: 5 5 0 100 200 0 6 7
device tmpfs mounted on /mnt/a\040b/x with fstype tmpfs
	per-op statistics
	      LOOKUP: 9 9 0 0 0 0 0 0 0
`

func TestParseStats(t *testing.T) {
	got := ParseStats(sample, func(string) bool { return true })
	if len(got) != 2 {
		t.Fatalf("mounts %v, want the two NFS ones", got)
	}
	ops := got["/var/lib/nfsdir/mounts/0123abcd"]
	want := OpStats{Ops: 12, Transmissions: 13, MajorTimeouts: 1, BytesSent: 2400, BytesReceived: 3000, QueueMillis: 1, RTTMillis: 14, ExecuteMillis: 16, Errors: 3}
	if ops["LOOKUP"] != want || ops["SYMLINK"].Ops != 2 || ops["NULL"].Ops != 1 || len(ops) != 3 {
		t.Errorf("share mount: %+v", ops)
	}
	if v3 := got["/mnt/a b"]; len(v3) != 1 || v3["LOOKUP"] != (OpStats{Ops: 5, Transmissions: 5, BytesSent: 100, BytesReceived: 200, RTTMillis: 6, ExecuteMillis: 7}) {
		t.Errorf("NFSv3 mount with a space: %+v", v3)
	}
	only := ParseStats(sample, func(mp string) bool { return mp == "/mnt/a b" })
	if len(only) != 1 || only["/mnt/a b"] == nil {
		t.Errorf("keep picks one mount: %v", only)
	}
	// A mount listed twice (one on top of the other) sums both.
	twice := ParseStats(sample+sample, func(string) bool { return true })
	if n := twice["/var/lib/nfsdir/mounts/0123abcd"]["LOOKUP"].Ops; n != 24 {
		t.Errorf("LOOKUPs of a mount listed twice: %d, want 24", n)
	}
}

func TestParseStatsBoundsOperationNames(t *testing.T) {
	var b strings.Builder
	b.WriteString("device h:/e mounted on /m with fstype nfs4 statvers=1.1\n\tper-op statistics\n")
	for i := range 3 * MaxOpsPerMount {
		fmt.Fprintf(&b, "\tOP%d: 1 1 0 0 0 0 0 0 0\n", i)
	}
	b.WriteString("\tOP0: 1 1 0 0 0 0 0 0 0\n")
	got := ParseStats(b.String(), func(string) bool { return true })["/m"]
	if len(got) != MaxOpsPerMount || got["OP0"].Ops != 2 {
		t.Errorf("%d operation names kept (OP0 %d), want %d (OP0 counted twice)", len(got), got["OP0"].Ops, MaxOpsPerMount)
	}
}

func FuzzParseStats(f *testing.F) {
	f.Add(sample, "LOOKUP", uint64(3), uint64(7))
	f.Add("device a mounted on /m with fstype nfs\nper-op statistics\nX: 1", "A", uint64(1), uint64(0))
	f.Fuzz(func(t *testing.T, text, op string, ops, rtt uint64) {
		all := ParseStats(text, func(string) bool { return true })
		for mp, m := range all {
			if len(m) == 0 || len(m) > MaxOpsPerMount {
				t.Fatalf("mount %q has %d operations", mp, len(m))
			}
			for name, st := range m {
				if st.Ops == 0 || strings.ContainsAny(name, " \t\n") {
					t.Fatalf("mount %q: operation %q %+v", mp, name, st)
				}
			}
		}
		// A line the kernel would write reads back as written. Its
		// operation names never hold a colon or any space, Unicode's
		// included (fuzzing once split one at U+3000).
		if op == "" || strings.Contains(op, ":") || strings.IndexFunc(op, unicode.IsSpace) >= 0 || ops == 0 {
			return
		}
		line := fmt.Sprintf("device h:/e mounted on /m\\040n with fstype nfs4 statvers=1.1\n\tper-op statistics\n\t%s: %d %d 0 1 2 3 %d 4 5\n", op, ops, ops, rtt)
		got := ParseStats(line, func(mp string) bool { return mp == "/m n" })["/m n"][op]
		if got != (OpStats{Ops: ops, Transmissions: ops, BytesSent: 1, BytesReceived: 2, QueueMillis: 3, RTTMillis: rtt, ExecuteMillis: 4, Errors: 5}) {
			t.Fatalf("%q read back as %+v", line, got)
		}
	})
}
