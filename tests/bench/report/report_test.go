package report

import (
	"strings"
	"testing"
)

func TestParseReadsRowsBehindPrefixes(t *testing.T) {
	a := Row{Measure: "CreateVolume", Case: "p50 of 20", Seconds: 0.0124, Calls: "9.0 vs 1.1",
		Against: []Base{{Kind: Bare, What: "mkdir", Seconds: 0.0005}}}
	b := Row{Measure: "Claims", Case: "200 at once", Seconds: 64.7}
	log := strings.Join([]string{
		"nfsdir bench in the lab guest",
		GuestPrefix + "Linux 6.1.0, 2 vCPUs ",
		"  measured: CreateVolume 12ms",
		a.Line(),
		"    bound_bench_test.go:66: " + b.Line(),
	}, "\n")
	rows, guest, err := Parse(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	if guest != "Linux 6.1.0, 2 vCPUs" {
		t.Errorf("guest %q", guest)
	}
	if len(rows) != 2 || rows[0].Case != a.Case || rows[0].Against[0].What != "mkdir" || rows[1].Seconds != 64.7 {
		t.Errorf("rows %+v", rows)
	}
}

func TestParseRefusesWhatIsNoMeasurement(t *testing.T) {
	for name, log := range map[string]string{
		"nothing":    "bench: FAILED: mount\n",
		"bad json":   RowPrefix + "{\"measure\":",
		"no time":    RowPrefix + `{"measure":"m","case":"c","seconds":0}`,
		"no measure": RowPrefix + `{"case":"c","seconds":1}`,
	} {
		if _, _, err := Parse(strings.NewReader(log)); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
}

func TestSectionHasOneTablePerMeasureWithItsColumns(t *testing.T) {
	r := Run{Command: "make bench", Args: "-files 10", Date: "the day", Commit: "abc1234", Machine: "2 cores", Guest: "TCG",
		Rows: []Row{
			{Measure: "CreateVolume", Case: "p50", Seconds: 0.012, Calls: "9 vs 1", Against: []Base{
				{Kind: Incumbent, What: "mount, mkdir, umount", Seconds: 0.15}, {Kind: Bare, What: "mkdir", Seconds: 0.0004}}},
			{Measure: "Usage", Case: "count", Seconds: 5, Note: "CPU 4 s", Against: []Base{{Kind: Bare, What: "du -s", Seconds: 35}}},
			{Measure: "CreateVolume", Case: "×200", Seconds: 1.5, Against: []Base{{Kind: Bare, What: "a | pipe", Seconds: 0.05}}},
		}}
	got := Section(r)
	for _, want := range []string{
		"Measured by `make bench` (`-files 10`) on the day at commit abc1234.\n",
		"#### CreateVolume\n\n| case | nfsdir | csi-driver-nfs's method | ratio | the bare operation | ratio | NFS calls per operation |\n",
		"| p50 | 12.0 ms | mount, mkdir, umount: 150 ms | 0.080× | mkdir: 0.400 ms | 30.0× | 9 vs 1 |\n",
		"| ×200 | 1.50 s |  |  | a \\| pipe: 50.0 ms | 30.0× |  |\n",
		"#### Usage\n\n| case | nfsdir | the bare operation | ratio |\n",
		"| count | 5.00 s (CPU 4 s) | du -s: 35.0 s | 0.143× |\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the section lacks %q:\n%s", want, got)
		}
	}
	if strings.Index(got, "#### CreateVolume") > strings.Index(got, "#### Usage") || strings.Count(got, "####") != 2 {
		t.Errorf("measures out of order or repeated:\n%s", got)
	}
}

func TestFormats(t *testing.T) {
	for s, want := range map[float64]string{0.000318: "0.318 ms", 0.0124: "12.4 ms", 0.5: "500 ms", 1.237: "1.24 s", 43.94: "43.9 s", 172.04: "172 s"} {
		if got := Duration(s); got != want {
			t.Errorf("Duration(%v) = %q, want %q", s, got, want)
		}
	}
	for x, want := range map[float64]string{0.0052: "0.0052×", 0.019: "0.019×", 1.294: "1.29×", 52.3: "52.3×"} {
		if got := Ratio(x); got != want {
			t.Errorf("Ratio(%v) = %q, want %q", x, got, want)
		}
	}
}

func TestSpliceReplacesOnlyBetweenTheMarkers(t *testing.T) {
	var res Results
	res.Put(Run{Command: "make bench", Date: "one day", Rows: []Row{{Measure: "m", Case: "c", Seconds: 1}}})
	res.Put(Run{Command: "make bench-bound", Date: "one day", Rows: []Row{{Measure: "k", Case: "c", Seconds: 2}}})
	res.Put(Run{Command: "make bench", Date: "a later day", Rows: []Row{{Measure: "m", Case: "c", Seconds: 3}}})
	if len(res.Runs) != 2 || res.Runs[0].Date != "a later day" {
		t.Fatalf("Put: %+v", res.Runs)
	}
	page := "# B\n\nintro\n" + Begin("make bench") + "\nold\n" + End("make bench") + "\nmiddle\n" +
		Begin("make bench-bound") + End("make bench-bound") + "\nend\n"
	got, err := Splice(page, res)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(got, "old") || !strings.Contains(got, "a later day") || !strings.HasPrefix(got, "# B\n\nintro\n") ||
		!strings.Contains(got, "\nmiddle\n") || !strings.HasSuffix(got, End("make bench-bound")+"\nend\n") {
		t.Errorf("spliced:\n%s", got)
	}
	again, _ := Splice(got, res)
	if again != got {
		t.Errorf("a second splice changed the page")
	}
	if _, err := Splice("# B\n"+End("make bench")+Begin("make bench"), res); err == nil {
		t.Errorf("markers out of order were accepted")
	}
}
