package provision

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// widthTuner chooses how many removals a purge keeps in flight. More
// removals in flight pay when each NFS call waits on the network or on the
// server's disk (a real server: every REMOVE is committed before it is
// answered), and cost when the work is bound by CPU (a server on the same
// host, or the controller's CPU limit): there extra threads only contend.
// The tuner starts at a given width and moves by measurement: it doubles
// the width while the rate rises by more than tuneGain, keeps the width
// that paid, and after tuneCalm quiet samples tries once more,
// alternately one step wider and one step narrower (narrower is kept when
// it is nearly as fast, within tuneSlack: the same rate with less load on
// the server). A step that is kept is followed by another the same way.
//
// It is pure logic: the caller times each sample and reports it.
type widthTuner struct {
	max       int     // widest allowed
	width     int     // width of the next sample
	base      float64 // entries per second at baseWidth; 0 before the first sample
	baseWidth int
	probing   bool                   // the next sample measures width against base
	calm      int                    // samples left before the next probe
	downNext  bool                   // the next probe is a narrower one
	samples   [maxTunedWidth + 1]int // samples timed at each width
}

// maxTunedWidth bounds the widths a tuner is made for.
const maxTunedWidth = 64

const (
	// tuneMinSample is the fewest removals a sample must hold to count.
	tuneMinSample = 64
	// tuneGain is how much faster a wider width must remove to be kept.
	tuneGain = 1.15
	// tuneSlack is how close to the wider width's rate a narrower width
	// must come to be kept.
	tuneSlack = 0.95
	// tuneCalm is how many samples pass between probes once settled.
	tuneCalm = 8
	// tuneSample is how many removals are timed together.
	tuneSample = 256
)

// newWidthTuner returns a tuner that starts at width start and never goes
// past widest.
func newWidthTuner(start, widest int) *widthTuner {
	widest = min(max(widest, 1), maxTunedWidth)
	start = min(max(start, 1), widest)
	return &widthTuner{max: widest, width: start, baseWidth: start}
}

// String says how many samples ran at each width, for the log.
func (t *widthTuner) String() string {
	var b strings.Builder
	b.WriteString("samples of ")
	b.WriteString(strconv.Itoa(tuneSample))
	b.WriteString(" removals by width:")
	for w, n := range t.samples {
		if n > 0 {
			fmt.Fprintf(&b, " %d:%d", w, n)
		}
	}
	return b.String()
}

// next returns the width for the next sample.
func (t *widthTuner) next() int { return t.width }

// observe reports that n removals took d at the width next returned.
func (t *widthTuner) observe(n int, d time.Duration) {
	if n < tuneMinSample || d <= 0 {
		return
	}
	t.samples[t.width]++
	rate := float64(n) / d.Seconds()
	switch {
	case t.base == 0:
		t.base, t.baseWidth = rate, t.width
		t.probe(false)
	case t.probing:
		t.probing = false
		wider := t.width > t.baseWidth
		if (wider && rate > t.base*tuneGain) || (!wider && rate >= t.base*tuneSlack) {
			t.base, t.baseWidth = rate, t.width
			t.probe(!wider) // it paid: one more step the same way
			return
		}
		t.width = t.baseWidth
		t.calm = tuneCalm
	default:
		t.base = (t.base + rate) / 2 // follow a server that slows or speeds up
		if t.calm--; t.calm <= 0 {
			t.probe(t.downNext)
			t.downNext = !t.downNext
		}
	}
}

// probe sets the next sample to one step narrower (down) or wider, if
// there is room; otherwise it waits another calm period.
func (t *widthTuner) probe(down bool) {
	w := t.baseWidth * 2
	if down {
		w = t.baseWidth / 2
	}
	w = min(max(w, 1), t.max)
	if w == t.baseWidth {
		t.calm = tuneCalm
		return
	}
	t.width, t.probing = w, true
}
