package placement

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

const gib = int64(1) << 30

func TestChoose(t *testing.T) {
	down := errors.New("mount: no answer")
	for _, c := range []struct {
		name    string
		members []Member
		policy  Policy
		want    int
		why     string // in the error when want < 0
	}{
		{"most available", []Member{{Name: "a", UsedBytes: 5 * gib, AvailableBytes: 5 * gib}, {Name: "b", UsedBytes: 1 * gib, AvailableBytes: 9 * gib}}, Policy{}, 1, ""},
		{"a tie: the hash", []Member{{Name: "a", AvailableBytes: gib}, {Name: "b", AvailableBytes: gib}}, Policy{}, tieWinner("pvc-1", "a", "b"), ""},
		{"within the slack: the hash", []Member{{Name: "a", AvailableBytes: 100 * gib}, {Name: "b", AvailableBytes: 96 * gib}}, Policy{}, tieWinner("pvc-1", "a", "b"), ""},
		{"beyond the slack: the most", []Member{{Name: "a", AvailableBytes: 100 * gib}, {Name: "b", AvailableBytes: 94 * gib}}, Policy{}, 0, ""},
		{"drained skipped", []Member{{Name: "a", AvailableBytes: 9 * gib, Drained: true}, {Name: "b", AvailableBytes: gib}}, Policy{}, 1, ""},
		{"unreachable skipped", []Member{{Name: "a", Err: down}, {Name: "b", AvailableBytes: gib}}, Policy{}, 1, ""},
		{"over the threshold skipped", []Member{{Name: "a", UsedBytes: 1, AvailableBytes: 9}, {Name: "b", UsedBytes: 95, AvailableBytes: 5}}, Policy{FillPercent: 90}, 0, ""},
		{"at the threshold skipped", []Member{{Name: "a", UsedBytes: 90, AvailableBytes: 10}}, Policy{FillPercent: 90}, -1, "export a: 90% full, at or over fillThreshold 90%"},
		{"the holder whatever its space", []Member{{Name: "a", AvailableBytes: 9 * gib}, {Name: "b", UsedBytes: 99, AvailableBytes: 1, Drained: true, Holds: "pvc-1"}}, Policy{FillPercent: 50}, 1, ""},
		{"an unreachable holder is not known to hold", []Member{{Name: "a", AvailableBytes: gib}, {Name: "b", Err: down, Holds: "pvc-1"}}, Policy{}, 0, ""},
		{"two holders", []Member{{Name: "a", Holds: "x"}, {Name: "b", Holds: "y"}}, Policy{}, -1, "exports export a and export b each hold"},
		{"none left", []Member{{Name: "a", Drained: true}, {Name: "b", Err: down}, {Name: "c", UsedBytes: gib}, {Name: "d"}}, Policy{}, -1,
			"export a: drained (drainExports); export b: not reachable: mount: no answer; export c: full; export d: its file system reports no size"},
		{"a class of server and share", []Member{{UsedBytes: 97, AvailableBytes: 3}}, Policy{FillPercent: 95}, -1, "the export: 97% full"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := Choose(c.members, c.policy, "pvc-1")
			if got != c.want {
				t.Fatalf("Choose = %d, %v; want %d", got, err, c.want)
			}
			if c.want >= 0 && err != nil || c.want < 0 && (err == nil || !strings.Contains(err.Error(), c.why)) {
				t.Errorf("error %v, want one with %q", err, c.why)
			}
		})
	}
}

// tieWinner is the index of the member Score puts first for volume.
func tieWinner(volume string, names ...string) int {
	best := 0
	for i, n := range names {
		if Score(volume, n) > Score(volume, names[best]) {
			best = i
		}
	}
	return best
}

// TestABurstSpreads: volumes made one after the other on exports of the
// same room (empty directories take none) spread evenly over them.
func TestABurstSpreads(t *testing.T) {
	ms := []Member{{Name: "fast-1", AvailableBytes: gib}, {Name: "fast-2", AvailableBytes: gib}, {Name: "fast-3", AvailableBytes: gib}}
	counts := make([]int, len(ms))
	for i := 0; i < 3000; i++ {
		got, err := Choose(ms, Policy{}, fmt.Sprintf("pvc-%08x-%d", i*2654435761, i))
		if err != nil {
			t.Fatal(err)
		}
		counts[got]++
	}
	for i, n := range counts {
		if n < 850 || n > 1150 {
			t.Errorf("%s got %d of 3000: %v", ms[i].Name, n, counts)
		}
	}
}

func TestPercentAndRoom(t *testing.T) {
	for _, c := range []struct {
		used, avail int64
		fill        int
		percent     int
		room        int64
	}{
		{0, 100, 0, 0, 100},
		{1, 99, 0, 1, 99},
		{50, 50, 80, 50, 30},
		{79, 21, 80, 79, 1},
		{80, 20, 80, 80, 0},
		{10, 10, 0, 50, 10},
		{0, 0, 0, 100, 0},
		{1 << 62, 1 << 62, 0, 50, 1 << 62},
	} {
		m := Member{UsedBytes: c.used, AvailableBytes: c.avail}
		if p := m.Percent(); p != c.percent {
			t.Errorf("%+v: Percent %d, want %d", m, p, c.percent)
		}
		if r := (Policy{FillPercent: c.fill}).Room(m); r != c.room {
			t.Errorf("%+v under %d%%: Room %d, want %d", m, c.fill, r, c.room)
		}
	}
}

// FuzzChoose: whatever the members, the one chosen holds the volume's
// record or may take volumes and has the most available bytes of those
// that may; an error only when no member may.
func FuzzChoose(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, uint8(90), "pvc-1")
	f.Add([]byte{0, 0, 0, 0, 255, 255, 255, 255}, uint8(0), "")
	f.Fuzz(func(t *testing.T, b []byte, fill uint8, name string) {
		p := Policy{FillPercent: int(fill % 101)}
		var ms []Member
		for len(b) >= 4 && len(ms) < 16 {
			m := Member{Name: string(rune('a' + len(ms))), UsedBytes: int64(b[0]) << (b[2] % 48), AvailableBytes: int64(b[1]) << (b[2] % 48)}
			m.Drained = b[3]&1 != 0
			if b[3]&2 != 0 {
				m.Err = errors.New("down")
			}
			if b[3]&12 == 12 {
				m.Holds = "v"
			}
			ms = append(ms, m)
			b = b[4:]
		}
		i, err := Choose(ms, p, name)
		holders := 0
		for _, m := range ms {
			if m.Holds != "" && m.Err == nil {
				holders++
			}
		}
		if holders > 0 {
			if holders == 1 && (err != nil || ms[i].Holds == "") || holders > 1 && err == nil {
				t.Fatalf("holders %d: %d, %v", holders, i, err)
			}
			return
		}
		most := int64(-1)
		for _, m := range ms {
			if p.skip(m) == "" {
				most = max(most, m.AvailableBytes)
			}
		}
		if (err == nil) != (i >= 0) || (i >= 0) != (most >= 0) {
			t.Fatalf("Choose %d, %v; the most available of those that may: %d", i, err, most)
		}
		if i >= 0 && (p.skip(ms[i]) != "" || float64(ms[i].AvailableBytes) < float64(most)*(1-Slack)-1) {
			t.Fatalf("Choose %d (%+v); the most available of those that may: %d", i, ms[i], most)
		}
		if i >= 0 && (p.Room(ms[i]) < 0 || p.Room(ms[i]) > ms[i].AvailableBytes) {
			t.Fatalf("room %d of %+v", p.Room(ms[i]), ms[i])
		}
	})
}
