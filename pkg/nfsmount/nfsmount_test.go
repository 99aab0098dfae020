package nfsmount

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nfsdir/nfsdir/pkg/fault"
)

// fakeMountCommand puts a "mount" on PATH that forks a child (as mount(8)
// forks mount.nfs) and both hang, like a mount to a dead server. Their
// command lines contain marker, the name of the script's directory.
func fakeMountCommand(t *testing.T, marker string) {
	dir := filepath.Join(t.TempDir(), marker)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	script := "#!/bin/sh\nif [ \"$1\" != child ]; then \"$0\" child & fi\nwhile :; do sleep 1; done\n"
	if err := os.WriteFile(filepath.Join(dir, "mount"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+":"+os.Getenv("PATH"))
}

func processesWith(marker string) []string {
	ents, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.Contains(string(b), marker) {
			out = append(out, e.Name()+":"+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return out
}

func TestMountKillsWholeProcessGroupOnDeadline(t *testing.T) {
	marker := "nfsdir-test-" + time.Now().Format("150405.000000")
	fakeMountCommand(t, marker)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := NewSystem().Mount(ctx, "server:/share", t.TempDir(), []string{"nfsvers=4.1"})
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Mount error = %v, want DeadlineExceeded", err)
	}
	if took > 7*time.Second {
		t.Errorf("Mount returned after %s", took)
	}
	deadline := time.Now().Add(3 * time.Second)
	for len(processesWith(marker)) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if ps := processesWith(marker); len(ps) > 0 {
		t.Fatalf("processes left behind: %v", ps)
	}
}

func TestFakeMountForks(t *testing.T) {
	// Guards the test above: the fake really leaves a child when not killed
	// as a group.
	marker := "nfsdir-fork-" + time.Now().Format("150405.000000")
	fakeMountCommand(t, marker)
	cmd := exec.Command("mount")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if n := len(processesWith(marker)); n < 2 {
		t.Fatalf("fake mount runs %d processes, want 2", n)
	}
	cmd.Process.Kill()
	cmd.Wait()
	for _, p := range processesWith(marker) {
		pid := strings.SplitN(p, ":", 2)[0]
		exec.Command("kill", "-9", pid).Run()
	}
}

func TestMountedReadsMountTableOnly(t *testing.T) {
	dir := t.TempDir()
	info := filepath.Join(dir, "mountinfo")
	content := "36 35 98:0 / /mnt/dead rw,noatime master:1 - nfs4 10.0.0.1:/export/v rw,vers=4.1\n" +
		"37 35 98:0 / /mnt/other rw - nfs4 10.0.0.1:/export/w rw\n" +
		"38 35 98:0 / /mnt/dead rw - nfs4 10.0.0.2:/export/top rw\n" +
		`39 35 98:0 / /mnt/team\040a\134b rw - nfs4 10.0.0.1:/export/team\040a\134b rw` + "\n"
	if err := os.WriteFile(info, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	s := NewSystem()
	s.mountInfo = info
	e, err := s.Mounted("/mnt/dead/")
	if err != nil || e == nil || e.Source != "10.0.0.2:/export/top" {
		t.Fatalf("Mounted = %+v, %v (the top mount must win)", e, err)
	}
	if e, _ := s.Mounted("/mnt/none"); e != nil {
		t.Errorf("Mounted(/mnt/none) = %+v", e)
	}
	if e, _ := s.Mounted("/mnt/team a\\b"); e == nil || e.Source != "10.0.0.1:/export/team a\\b" {
		t.Errorf("Mounted of a path with a space and a backslash = %+v", e)
	}
	if ts, _ := s.Targets("10.0.0.1:/export/team a\\b"); len(ts) != 1 || ts[0] != "/mnt/team a\\b" {
		t.Errorf("Targets of a source with a space = %v", ts)
	}
	ts, err := s.Targets("10.0.0.1:/export/w")
	if err != nil || len(ts) != 1 || ts[0] != "/mnt/other" {
		t.Errorf("Targets = %v, %v", ts, err)
	}
}

func TestProbeSharesOneCallPerPath(t *testing.T) {
	s := NewSystem()
	u, err := s.Probe(context.Background(), t.TempDir())
	if err != nil || u.TotalBytes <= 0 {
		t.Fatalf("Probe = %+v, %v", u, err)
	}
	if _, err := s.Probe(context.Background(), "/nonexistent-nfsdir"); err == nil {
		t.Error("Probe of a missing path succeeded")
	}
	if n := s.InFlightProbes(); n != 0 {
		t.Errorf("%d probes still in flight", n)
	}
}

func TestUnmountOfUnmountedTargetIsNoop(t *testing.T) {
	if err := NewSystem().Unmount(context.Background(), t.TempDir()); err != nil {
		t.Fatal(err)
	}
}

func TestIsStale(t *testing.T) {
	wrapped := fmt.Errorf("write record: %w", &os.LinkError{Op: "symlinkat", Err: syscall.ESTALE})
	if !IsStale(wrapped) || !IsStale(&os.PathError{Err: syscall.EIO}) {
		t.Error("stale errors not recognised through wrapping")
	}
	if IsStale(syscall.EACCES) || IsStale(errors.New("x")) || IsStale(nil) {
		t.Error("non-stale error reported stale")
	}
}

// scriptMount puts a "mount" on PATH running script, which gets mount's
// arguments; the arguments of each call are appended to the returned file.
func scriptMount(t *testing.T, script string) (argsFile string) {
	dir := t.TempDir()
	argsFile = filepath.Join(dir, "args")
	body := "#!/bin/sh\nprintf '%s\\n' \"$*\" >>" + argsFile + "\n" + script + "\n"
	if err := os.WriteFile(filepath.Join(dir, "mount"), []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+":"+os.Getenv("PATH"))
	return argsFile
}

// TestMountExitZeroWithoutMountFails: mount(8) exiting 0 is not proof of a
// mount (mount.nfs with "bg" exits 0 when the server refuses and retries in
// a daemon); Mount checks the mount table, fails Unavailable, and leaves no
// process of the helper's group behind.
func TestMountExitZeroWithoutMountFails(t *testing.T) {
	marker := "nfsdir-exit0-" + time.Now().Format("150405.000000")
	argsFile := scriptMount(t, "sh -c 'while :; do sleep 1; done' "+marker+" &\nexit 0")
	target := t.TempDir()
	err := NewSystem().Mount(context.Background(), "server:/share", target, []string{"hard"})
	if err == nil || fault.KindOf(err) != fault.Unavailable || !strings.Contains(err.Error(), "mount table shows nothing") {
		t.Fatalf("Mount = %v, want Unavailable naming the empty mount table", err)
	}
	args, _ := os.ReadFile(argsFile)
	if want := "-t nfs -o hard,fg -- server:/share " + target + "\n"; string(args) != want {
		t.Errorf("mount(8) got %q, want %q (fg last, -- before source and target)", args, want)
	}
	deadline := time.Now().Add(3 * time.Second)
	for len(processesWith(marker)) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if ps := processesWith(marker); len(ps) > 0 {
		t.Fatalf("helper processes outlived Mount: %v", ps)
	}
}

func TestMountRefusesBackgroundOption(t *testing.T) {
	argsFile := scriptMount(t, "exit 0")
	err := NewSystem().Mount(context.Background(), "server:/share", t.TempDir(), []string{"hard", "bg"})
	if fault.KindOf(err) != fault.InvalidArgument || !strings.Contains(err.Error(), `"bg"`) {
		t.Fatalf("Mount with bg = %v, want InvalidArgument naming bg", err)
	}
	if _, err := os.Stat(argsFile); err == nil {
		t.Error("mount(8) ran for a refused option")
	}
}

func TestClassifyMountFailure(t *testing.T) {
	cases := map[string]fault.Kind{
		"mount.nfs: access denied by server while mounting 10.0.0.1:/x":                             fault.PermissionDenied,
		"mount.nfs: an incorrect mount option was specified":                                        fault.InvalidArgument,
		"mount.nfs: Connection refused":                                                             fault.Unavailable,
		"mount.nfs: Connection timed out":                                                           fault.Unavailable,
		"mount.nfs: mounting 10.0.0.1:/x failed, reason given by server: No such file or directory": fault.NotFound,
		"something else": fault.Internal,
	}
	for out, want := range cases {
		if got := fault.KindOf(classifyMountFailure(errors.New("mount"), out)); got != want {
			t.Errorf("classify(%q) = %v, want %v", out, got, want)
		}
	}
}
