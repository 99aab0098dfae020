package main

import (
	"archive/tar"
	"io"
	"os"
	"path/filepath"
	"testing"

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
	if err := build(out, "lab.local/nfsdir:lab", []string{"/nfsdir"}, []string{bin + ":/nfsdir"}, []string{tree + ":/"}, []string{"A=b"}); err != nil {
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
