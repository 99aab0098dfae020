package k8s

import "testing"

// TestLostFirstDial: the logs of sidecars that exited on a lost connection,
// as the lab saw them. Only the one that never got an answer from the
// driver is the first dial's.
func TestLostFirstDial(t *testing.T) {
	const start = `I1203 10:33:58.647177       1 feature_gate.go:385] feature gates: {map[VolumeAttributesClass:true]}
I1203 10:33:58.722465       1 csi-provisioner.go:168] "Version" version="v5.3.0"
I1203 10:33:58.789040       1 csi-provisioner.go:191] Building kube configs for running in cluster...
I1203 10:33:59.605031       1 envvar.go:172] "Feature gate default state" feature="InformerResourceVersion" enabled=false
`
	const lost = `E1203 10:34:03.254053       1 connection.go:208] "Lost connection" address="unix:///csi/csi.sock"
E1203 10:34:03.258237       1 connection.go:116] "Lost connection to CSI driver, exiting"
`
	for _, c := range []struct {
		name string
		log  string
		want bool
	}{
		{"lost during the first dial", start + lost, true},
		{"lost after the probe", start + `I1203 10:34:32.274319       1 common.go:143] "Probing CSI driver for readiness"
` + lost, false},
		{"lost after asking the driver's name", start + `I1203 10:34:30.624649       1 main.go:205] CSI driver name: "nfsdir.csi.io"
` + lost, false},
		{"killed, not lost", start, false},
		{"log cut before its end", start[:100], false},
	} {
		if got := lostFirstDial(c.log); got != c.want {
			t.Errorf("%s: lostFirstDial = %v, want %v", c.name, got, c.want)
		}
	}
}
