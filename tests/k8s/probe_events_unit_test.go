package k8s

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// A controller pod's liveness probe failed once in CI, when its containers
// took longer than the old 30 s initial delay to start on a loaded node:
// that message must still fail the scenario; a startup probe's failure on a
// pod whose containers have all started must not.
func TestProbeEventsWhileStarting(t *testing.T) {
	for msg, want := range map[string]bool{
		`Liveness probe failed: Get "http://203.0.113.26:29652/healthz": dial tcp 203.0.113.26:29652: connect: connection refused`: false,
		`Startup probe failed: Get "http://203.0.113.26:29652/healthz": dial tcp 203.0.113.26:29652: connect: connection refused`:  true,
		`Startup probe failed: HTTP probe failed with statuscode: 500`:                                                             true,
		`Readiness probe failed: HTTP probe failed with statuscode: 500`:                                                           false,
	} {
		if got := expectedWhileStarting(msg); got != want {
			t.Errorf("expectedWhileStarting(%q) = %v, want %v", msg, got, want)
		}
	}
	yes, no := true, false
	pod := func(started ...*bool) corev1.Pod {
		var p corev1.Pod
		for _, s := range started {
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Started: s})
		}
		return p
	}
	if !allStarted(pod(&yes, &yes)) || allStarted(pod(&yes, &no)) || allStarted(pod(&yes, nil)) || allStarted(pod()) {
		t.Error("allStarted")
	}
}
