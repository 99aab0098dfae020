package provision

import (
	"testing"
	"time"
)

// runTuner feeds the tuner samples of tuneSample removals whose duration
// the model gives for each width, and returns the widths it chose.
func runTuner(t *widthTuner, samples int, model func(width int) time.Duration) []int {
	var widths []int
	for i := 0; i < samples; i++ {
		w := t.next()
		widths = append(widths, w)
		t.observe(tuneSample, model(w))
	}
	return widths
}

// latencyBound: each removal waits lat on the network, and the server
// handles up to par at once.
func latencyBound(lat time.Duration, par int) func(int) time.Duration {
	return func(w int) time.Duration {
		return time.Duration(tuneSample) * lat / time.Duration(min(w, par))
	}
}

func TestTunerClimbsWhenRemovalsWait(t *testing.T) {
	tu := newWidthTuner(1, 16)
	widths := runTuner(tu, 40, latencyBound(2*time.Millisecond, 64))
	if got := widths[len(widths)-1]; got != 16 {
		t.Fatalf("settled at %d removals in flight on a latency-bound server, want 16: %v", got, widths)
	}
	// It gets there within five samples (1, 2, 4, 8, 16).
	if widths[4] != 16 {
		t.Fatalf("climbed too slowly: %v", widths)
	}
}

func TestTunerStopsWhereTheServerSaturates(t *testing.T) {
	tu := newWidthTuner(1, 16)
	widths := runTuner(tu, 60, latencyBound(2*time.Millisecond, 4))
	// 4 pays, 8 does not: most samples run at 4, none settles above.
	at4 := 0
	for _, w := range widths[5:] {
		if w == 4 {
			at4++
		}
		if w > 8 {
			t.Fatalf("went to %d past the saturation point: %v", w, widths)
		}
	}
	if at4 < len(widths[5:])*3/4 {
		t.Fatalf("only %d of %d samples at the best width 4: %v", at4, len(widths[5:]), widths)
	}
}

func TestTunerStaysNarrowWhenCPUBound(t *testing.T) {
	// CPU-bound: wider only adds contention (10% per doubling).
	tu := newWidthTuner(1, 16)
	testNarrow(t, tu, 0)
	// Started wide, it comes down within a few probes.
	testNarrow(t, newWidthTuner(4, 16), 20)
}

func testNarrow(t *testing.T, tu *widthTuner, settle int) {
	t.Helper()
	cpu := func(w int) time.Duration {
		d := time.Duration(tuneSample) * 300 * time.Microsecond
		for ; w > 1; w /= 2 {
			d += d / 10
		}
		return d
	}
	widths := runTuner(tu, 100+settle, cpu)[settle:]
	ones := 0
	for _, w := range widths {
		if w == 1 {
			ones++
		}
		if w > 2 {
			t.Fatalf("went to %d on a CPU-bound server: %v", w, widths)
		}
	}
	if ones < 85 {
		t.Fatalf("only %d of 100 samples at width 1: %v", ones, widths)
	}
}

func TestTunerComesDownWhenTheServerSlows(t *testing.T) {
	tu := newWidthTuner(1, 16)
	runTuner(tu, 20, latencyBound(2*time.Millisecond, 64))
	if tu.next() != 16 {
		t.Fatalf("did not climb: %d", tu.next())
	}
	// The server now serves one call at a time: wider is no faster.
	widths := runTuner(tu, 80, latencyBound(2*time.Millisecond, 1))
	if got := widths[len(widths)-1]; got > 2 {
		t.Fatalf("still %d wide on a server that serves one call at a time: %v", got, widths)
	}
}

func TestTunerIgnoresSmallSamples(t *testing.T) {
	tu := newWidthTuner(1, 16)
	for i := 0; i < 10; i++ {
		tu.observe(tuneMinSample-1, time.Millisecond)
		tu.observe(tuneSample, 0)
	}
	if tu.next() != 1 || tu.base != 0 {
		t.Fatalf("small or empty samples moved the tuner: width %d base %v", tu.next(), tu.base)
	}
}

func FuzzTuner(f *testing.F) {
	f.Add(uint8(16), []byte{1, 2, 3, 200, 4, 9})
	f.Fuzz(func(t *testing.T, maxW uint8, durs []byte) {
		m := int(maxW%32) + 1
		tu := newWidthTuner(int(maxW/16), m)
		for _, b := range durs {
			tu.observe(tuneSample, time.Duration(b)*time.Millisecond)
			if w := tu.next(); w < 1 || w > m {
				t.Fatalf("width %d outside [1,%d]", w, m)
			}
		}
	})
}
