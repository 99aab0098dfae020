package main

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func TestBuildWritesLoadableImage(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "tool")
	os.WriteFile(bin, []byte("#!/bin/sh\necho hi\n"), 0o755)
	tree := filepath.Join(dir, "tree")
	os.MkdirAll(filepath.Join(tree, "sbin"), 0o755)
	os.WriteFile(filepath.Join(tree, "sbin", "mount.nfs"), []byte("elf"), 0o755)
	os.Chmod(filepath.Join(tree, "sbin", "mount.nfs"), 0o755|os.ModeSetuid) // as Debian ships it
	os.Symlink("mount.nfs", filepath.Join(tree, "sbin", "mount.nfs4"))
	out := filepath.Join(dir, "img.tar")
	if err := build(out, "lab.local/nfsdir:lab", []string{"/nfsdir"}, []string{bin + ":/nfsdir"}, []string{tree + ":/"}, []string{"A=b"}, ""); err != nil {
		t.Fatal(err)
	}
	tag, _ := name.NewTag("lab.local/nfsdir:lab")
	img, err := tarball.ImageFromPath(out, &tag)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil || cfg.Config.Entrypoint[0] != "/nfsdir" || cfg.OS != "linux" || cfg.Config.Env[1] != "A=b" {
		t.Fatalf("config %+v %v", cfg, err)
	}
	layers, _ := img.Layers()
	if len(layers) != 1 {
		t.Fatalf("%d layers", len(layers))
	}
	rc, _ := layers[0].Uncompressed()
	defer rc.Close()
	got := map[string]*tar.Header{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got[h.Name] = h
	}
	if h := got["nfsdir"]; h == nil || h.Mode&0o111 == 0 || h.Uid != 0 {
		t.Errorf("nfsdir entry %+v", h)
	}
	if h := got["sbin/mount.nfs4"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "mount.nfs" {
		t.Errorf("symlink entry %+v", h)
	}
	if h := got["sbin/mount.nfs"]; h == nil || h.Mode&0o4000 == 0 {
		t.Errorf("setuid bit lost: %+v", h)
	}
	if got["sbin/"] == nil {
		t.Error("parent directory missing")
	}
}

// The same contents make the same image, whatever the files' times: the
// second build is the cached one, and new contents replace the tag's
// cached image.
func TestTheCacheKeepsOneImagePerTagByContent(t *testing.T) {
	dir := t.TempDir()
	cache := filepath.Join(dir, "cache")
	bin := filepath.Join(dir, "tool")
	build1 := func(out string) []byte {
		t.Helper()
		if err := build(out, "lab.local/tool:lab", []string{"/tool"}, []string{bin + ":/tool"}, nil, nil, cache); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	os.WriteFile(bin, []byte("one"), 0o755)
	first := build1(filepath.Join(dir, "1.tar"))
	os.Chtimes(bin, time.Now().Add(time.Hour), time.Now().Add(time.Hour))
	cached, _ := filepath.Glob(filepath.Join(cache, "*.tar"))
	if len(cached) != 1 {
		t.Fatalf("cache holds %v", cached)
	}
	// Mark the cached copy: a second build of the same contents is it.
	f, _ := os.OpenFile(cached[0], os.O_APPEND|os.O_WRONLY, 0)
	f.Write([]byte("cached"))
	f.Close()
	if second := build1(filepath.Join(dir, "2.tar")); string(second) != string(first)+"cached" {
		t.Error("the same contents were built again, not copied from the cache")
	}
	os.WriteFile(bin, []byte("two"), 0o755)
	if third := build1(filepath.Join(dir, "3.tar")); string(third) == string(first) || bytes.HasSuffix(third, []byte("cached")) {
		t.Error("new contents came from the cache")
	}
	now, _ := filepath.Glob(filepath.Join(cache, "*.tar"))
	if len(now) != 1 || now[0] == cached[0] {
		t.Errorf("cache holds %v after new contents, had %v", now, cached)
	}
}
