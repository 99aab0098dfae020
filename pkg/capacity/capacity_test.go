package capacity

import (
	"strings"
	"testing"
	"time"
)

func TestHardLinksCountOnceWhenAllInTheTree(t *testing.T) {
	var tl Tally
	tl.Add(true, 4096, 3) // a directory: its own inode, whatever its links
	for range 3 {
		tl.Add(false, 8192, 3) // one file, three names
	}
	tl.Add(false, 100, 1)
	b, i := tl.Count()
	if b != 4096+8192+100 || i != 3 {
		t.Fatalf("Count() = %d bytes, %d inodes; want %d, 3", b, i, 4096+8192+100)
	}
	if tl.Entries() != 5 {
		t.Fatalf("Entries() = %d, want 5", tl.Entries())
	}
}

func TestHardLinkFromOutsideIsChargedInPart(t *testing.T) {
	var tl Tally
	tl.Add(false, 9000, 2) // the other name is in another volume
	if b, i := tl.Count(); b != 4500 || i != 1 {
		t.Fatalf("Count() = %d, %d; want 4500, 1 (half the file, rounded)", b, i)
	}
}

func TestManyLinkCountsStayBounded(t *testing.T) {
	var tl Tally
	var want int64
	for n := uint64(2); n < 2+3*maxLinkCounts; n++ {
		for range n {
			tl.Add(false, int64(n)*512, n)
		}
		want += int64(n) * 512
	}
	if len(tl.shared) > maxLinkCounts {
		t.Fatalf("%d link counts kept, more than %d", len(tl.shared), maxLinkCounts)
	}
	b, i := tl.Count()
	if b != want || i != 3*maxLinkCounts {
		t.Fatalf("Count() = %d, %d; want %d, %d", b, i, want, 3*maxLinkCounts)
	}
}

func FuzzTallyCountsEachFileOnce(f *testing.F) {
	f.Add([]byte{1, 2, 3, 200, 7})
	f.Fuzz(func(t *testing.T, files []byte) {
		var tl Tally
		var wantBytes, wantInodes int64
		for i, b := range files {
			n := uint64(b%7) + 1
			size := int64(i+1) * int64(b)
			for range n {
				tl.Add(false, size, n)
			}
			wantBytes += size
			wantInodes++
		}
		if b, i := tl.Count(); b != wantBytes || i != wantInodes {
			t.Fatalf("Count() = %d, %d; want %d, %d", b, i, wantBytes, wantInodes)
		}
	})
}

func TestFigureRoundTrip(t *testing.T) {
	f := Figure{Token: "abc", Bytes: 12345, Inodes: 7, Counted: time.Date(2026, 12, 1, 2, 3, 4, 0, time.UTC), Took: time.Second}
	s, err := f.Encode()
	if err != nil {
		t.Fatal(err)
	}
	g, err := Decode(s)
	if err != nil || !g.Counted.Equal(f.Counted) || g.Bytes != f.Bytes || g.Token != f.Token {
		t.Fatalf("Decode(Encode(%+v)) = %+v, %v", f, g, err)
	}
}

func TestDecodeRefusesWhatNfsdirNeverWrites(t *testing.T) {
	for _, s := range []string{"", "{}", `{"token":"a","bytes":-1}`, `{"token":"a"} x`, `{"token":"a","extra":1}`, strings.Repeat(" ", 2000)} {
		if _, err := Decode(s); err == nil {
			t.Errorf("Decode(%q) succeeded", s)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(`{"token":"t","bytes":1,"inodes":1,"counted":"2026-12-01T00:00:00Z","took":5}`)
	f.Fuzz(func(t *testing.T, s string) {
		fig, err := Decode(s)
		if err != nil {
			return
		}
		enc, err := fig.Encode()
		if err != nil {
			t.Fatalf("decoded figure %+v does not encode: %v", fig, err)
		}
		if _, err := Decode(enc); err != nil {
			t.Fatalf("re-encoded figure %q does not decode: %v", enc, err)
		}
	})
}

func TestReport(t *testing.T) {
	space := Space{TotalBytes: 100 << 30, AvailableBytes: 3 << 30, TotalInodes: 1000, FreeInodes: 400}
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name           string
		capacity, used int64
		total, avail   int64
		over           bool
	}{
		{"fresh", 5 << 30, 0, 5 << 30, 3 << 30, false},         // the export has less left than the volume
		{"half", 4 << 30, 2 << 30, 4 << 30, 2 << 30, false},    // the volume has less left
		{"over", 1 << 30, 3 << 30, 1 << 30, 0, true},           // nothing left, and said so
		{"no capacity", 0, 1 << 30, 100 << 30, 3 << 30, false}, // the export stands for it
	} {
		st := Report(c.capacity, Figure{Bytes: c.used, Inodes: 10, Counted: at}, space)
		if st.TotalBytes != c.total || st.AvailableBytes != c.avail || st.UsedBytes != c.used || (st.Over != "") != c.over {
			t.Errorf("%s: Report = %+v; want total %d, available %d, over %v", c.name, st, c.total, c.avail, c.over)
		}
		if st.TotalInodes != 410 || st.AvailableInodes != 400 || st.UsedInodes != 10 {
			t.Errorf("%s: inodes %+v", c.name, st)
		}
	}
	if got := Report(1<<30, Figure{Bytes: 3 << 30, Counted: at}, space).Over; got != "uses 3.0 GiB of 1.0 GiB (2.0 GiB over its capacity), counted 2026-12-01T00:00:00Z" {
		t.Errorf("Over = %q", got)
	}
}
