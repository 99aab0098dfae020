package serveragent_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nfsdir/nfsdir/pkg/params"
	"github.com/nfsdir/nfsdir/pkg/provision"
	"github.com/nfsdir/nfsdir/pkg/serveragent"
	"github.com/nfsdir/nfsdir/pkg/treecopy"
)

// gate is a Limiter that holds every copy until it is opened, and says
// when the first one is held.
type gate struct {
	held, open chan struct{}
	once       sync.Once
}

func (g *gate) Wait(ctx context.Context, _ int) error {
	g.once.Do(func() { close(g.held) })
	select {
	case <-g.open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// Copies waiting for a worker hold no descriptor: with the one worker
// busy, twenty more copies asked for at once leave the agent's open files
// where they were, and all are made once the worker is free.
func TestCopiesWaitForAWorkerBeforeOpeningAnything(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	g := &gate{held: make(chan struct{}), open: make(chan struct{})}
	c := treecopy.Default
	c.Limit = g
	agent, err := serveragent.New(serveragent.Config{CopyExports: []serveragent.Export{{Share: "/e", Dir: dir}},
		FirstProject: 1, LastProject: 9, CopyWorkers: 1, Copier: c})
	if err != nil {
		t.Fatal(err)
	}
	a := controllerArea(t, dir, nil)
	req := func(name string) provision.Request {
		return provision.Request{Name: name, SubDir: name, OnDelete: params.Delete, Mode: 0o755, UID: -1, GID: -1, CapacityBytes: 1 << 20}
	}
	src, err := a.Create(ctx, req("pvc-src"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pvc-src", "data"), []byte("source"), 0o640); err != nil {
		t.Fatal(err)
	}
	ino := func(sub string) uint64 {
		st, err := os.Stat(filepath.Join(dir, sub))
		if err != nil {
			t.Fatal(err)
		}
		return st.Sys().(*syscall.Stat_t).Ino
	}
	var copies []provision.RemoteCopy
	for i := range 21 {
		r := req(fmt.Sprint("pvc-clone-", i))
		r.Source = &provision.Source{Key: src.Key(), Token: src.Token}
		rec, err := a.Create(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		copies = append(copies, provision.RemoteCopy{Share: "/e",
			Src: provision.CopyDir{SubDir: src.SubDir, Token: src.Token, FileID: ino(src.SubDir)},
			Dst: provision.CopyDir{SubDir: rec.SubDir, Token: rec.Token, FileID: ino(rec.SubDir)}})
	}
	errs := make(chan error, len(copies))
	run := func(rc provision.RemoteCopy) {
		_, err := agent.Copy(ctx, &rc)
		errs <- err
	}
	go run(copies[0])
	<-g.held
	before := openFDs(t)
	for _, rc := range copies[1:] {
		go run(rc)
	}
	time.Sleep(500 * time.Millisecond) // they reach the wait for a worker
	if grew := openFDs(t) - before; grew > 5 {
		t.Errorf("20 copies waiting for a worker hold %d more descriptors", grew)
	}
	close(g.open)
	for range copies {
		if err := <-errs; err != nil {
			t.Errorf("copy: %v", err)
		}
	}
}
