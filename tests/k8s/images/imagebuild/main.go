// Command imagebuild writes a single-layer container image as a
// docker-archive tarball that `ctr images import` loads, without a Docker
// engine or a registry. The end-to-end lab uses it for the pause, busybox,
// nfsdir and sidecar images.
//
//	imagebuild -o img.tar -tag lab.local/nfsdir:lab -entrypoint /nfsdir \
//	    -file bin/nfsdir:/nfsdir -tree rootfs/:/
//
// -file SRC:DST adds one file (mode kept); -tree DIR:DST adds a directory
// tree, keeping symlinks as symlinks. Entries carry no times, owners or
// names of users, so the same contents make the same layer; with -cache
// DIR, an image whose layer and configuration were built before is copied
// from DIR instead of being compressed again (DIR keeps the latest image
// of each tag).
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(s string) error { *l = append(*l, s); return nil }

func main() {
	var files, trees, env list
	out := flag.String("o", "", "output tarball")
	tag := flag.String("tag", "", "image tag, e.g. lab.local/nfsdir:lab")
	entry := flag.String("entrypoint", "", "entrypoint, space separated")
	flag.Var(&files, "file", "SRC:DST file to add (repeatable)")
	flag.Var(&trees, "tree", "DIR:DST directory tree to add (repeatable)")
	flag.Var(&env, "env", "KEY=VALUE environment variable (repeatable)")
	cache := flag.String("cache", "", "directory of images built before, by content")
	flag.Parse()
	if *out == "" || *tag == "" {
		fmt.Fprintln(os.Stderr, "imagebuild: -o and -tag are required")
		os.Exit(2)
	}
	if err := build(*out, *tag, strings.Fields(*entry), files, trees, env, *cache); err != nil {
		fmt.Fprintln(os.Stderr, "imagebuild:", err)
		os.Exit(1)
	}
}

// entry is one path of the layer.
type entry struct {
	hdr  *tar.Header
	data []byte
}

// build writes the image tag to out: one layer of files and trees, run
// as entrypoint with env; with cache set, from there when it holds the
// same image.
func build(out, tag string, entrypoint, files, trees, env []string, cache string) error {
	ents := map[string]*entry{}
	addDirs := func(p string) {
		for d := path.Dir(p); d != "/" && d != "."; d = path.Dir(d) {
			if _, ok := ents[d]; !ok {
				ents[d] = &entry{hdr: &tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d, "/") + "/", Mode: 0o755, ModTime: time.Unix(0, 0)}}
			}
		}
	}
	add := func(src, dst string) error {
		st, err := os.Lstat(src)
		if err != nil {
			return err
		}
		dst = path.Clean("/" + dst)
		hdr, err := tar.FileInfoHeader(st, "")
		if err != nil {
			return err
		}
		hdr.Name = strings.TrimPrefix(dst, "/")
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
		hdr.ModTime, hdr.AccessTime, hdr.ChangeTime = time.Unix(0, 0), time.Time{}, time.Time{}
		e := &entry{hdr: hdr}
		switch {
		case st.Mode()&fs.ModeSymlink != 0:
			if hdr.Linkname, err = os.Readlink(src); err != nil {
				return err
			}
		case st.IsDir():
			hdr.Name += "/"
		case st.Mode().IsRegular():
			if e.data, err = os.ReadFile(src); err != nil {
				return err
			}
		default:
			return nil // devices, sockets: not in images
		}
		addDirs(dst)
		ents[dst] = e
		return nil
	}
	for _, f := range files {
		src, dst, ok := strings.Cut(f, ":")
		if !ok {
			return fmt.Errorf("-file %q: want SRC:DST", f)
		}
		if err := add(src, dst); err != nil {
			return err
		}
	}
	for _, t := range trees {
		dir, dst, ok := strings.Cut(t, ":")
		if !ok {
			return fmt.Errorf("-tree %q: want DIR:DST", t)
		}
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(dir, p)
			if rel == "." {
				return nil
			}
			return add(p, path.Join(dst, filepath.ToSlash(rel)))
		})
		if err != nil {
			return err
		}
	}
	names := make([]string, 0, len(ents))
	for n := range ents {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		e := ents[n]
		e.hdr.Size = int64(len(e.data))
		if err := tw.WriteHeader(e.hdr); err != nil {
			return err
		}
		if _, err := tw.Write(e.data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	layerBytes := buf.Bytes()
	// The cache keeps one image per tag: its name, then its key.
	tagPrefix := strings.NewReplacer("/", "_", ":", "_").Replace(tag) + "-"
	cached := ""
	if cache != "" {
		cached = filepath.Join(cache, tagPrefix+imageKey(tag, entrypoint, env, layerBytes)+".tar")
		if err := copyFile(cached, out); err == nil {
			return nil
		}
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerBytes)), nil
	}, tarball.WithCompressionLevel(gzip.BestSpeed))
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cfg = cfg.DeepCopy()
	cfg.Architecture, cfg.OS = "amd64", "linux"
	cfg.Config = v1.Config{Entrypoint: entrypoint, Env: append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, env...)}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return err
	}
	ref, err := name.NewTag(tag)
	if err != nil {
		return err
	}
	if err := tarball.WriteToFile(out, ref, img); err != nil {
		return err
	}
	if cached != "" {
		keep(cached, tagPrefix, out)
	}
	return nil
}

// imageKey names an image by what it holds: its tag, entrypoint,
// environment and layer.
func imageKey(tag string, entrypoint, env []string, layer []byte) string {
	h := sha256.New()
	fmt.Fprintf(h, "%q %q %q\n", tag, entrypoint, env)
	h.Write(layer)
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// keep copies the image at out to cached and removes the cache's other
// images of its tag (named tagPrefix and a key); a cache that cannot be
// written only costs the next build its time.
func keep(cached, tagPrefix, out string) {
	dir := filepath.Dir(cached)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return
	}
	tmp := cached + ".tmp"
	if copyFile(out, tmp) != nil || os.Rename(tmp, cached) != nil {
		os.Remove(tmp)
		return
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		key, ok := strings.CutPrefix(e.Name(), tagPrefix)
		if ok && e.Name() != filepath.Base(cached) && len(key) == len(filepath.Base(cached))-len(tagPrefix) {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

// copyFile copies the file src to dst.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	o, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(o, in); err != nil {
		o.Close()
		return err
	}
	return o.Close()
}
