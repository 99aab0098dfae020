package treecopy

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// gnuSparse is an archive of one old-GNU sparse file ('S') declaring real
// bytes, of which the last one is data.
func gnuSparse(real int64) []byte {
	var buf bytes.Buffer
	w := tar.NewWriter(&buf)
	w.WriteHeader(&tar.Header{Name: "sparse", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1, Format: tar.FormatGNU})
	w.Write([]byte("x"))
	w.Close()
	h := buf.Bytes()[:512]
	h[156] = tar.TypeGNUSparse
	copy(h[386:], fmt.Sprintf("%011o\x00%011o\x00", real-1, 1)) // the sparse map's one extent
	copy(h[483:], fmt.Sprintf("%011o\x00", real))               // the real size
	copy(h[148:156], "        ")
	sum := 0
	for _, c := range h {
		sum += int(c)
	}
	copy(h[148:], fmt.Sprintf("%06o\x00 ", sum))
	return buf.Bytes()
}

// FuzzUnpack feeds the restore any archive (headers, PAX records, GNU
// long names and sparse maps included): whatever it holds, nothing is
// made outside the directory unpacked into, no file data passes the byte
// budget, and the restore ends.
func FuzzUnpack(f *testing.F) {
	seed := func(entries ...*tar.Header) []byte {
		var buf bytes.Buffer
		w := tar.NewWriter(&buf)
		for _, h := range entries {
			body := []byte(nil)
			if h.Typeflag == tar.TypeReg {
				body = bytes.Repeat([]byte("x"), int(h.Size))
			}
			if w.WriteHeader(h) == nil {
				w.Write(body)
			}
		}
		w.Close()
		return buf.Bytes()
	}
	long := strings.Repeat("n", 200) + "/" + strings.Repeat("m", 200)
	f.Add(seed(&tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755}, &tar.Header{Name: "d/f", Typeflag: tar.TypeReg, Mode: 0o4755, Size: 3}))
	f.Add(seed(&tar.Header{Name: long, Typeflag: tar.TypeReg, Mode: 0o644, Size: 1, Format: tar.FormatPAX, PAXRecords: map[string]string{"comment": "x"}}))
	f.Add(seed(&tar.Header{Name: long, Typeflag: tar.TypeReg, Mode: 0o644, Size: 1, Format: tar.FormatGNU}))
	f.Add(seed(&tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "../../x"}, &tar.Header{Name: "l/f", Typeflag: tar.TypeReg, Size: 1}))
	f.Add(seed(&tar.Header{Name: "a", Typeflag: tar.TypeReg, Size: 1}, &tar.Header{Name: "h", Typeflag: tar.TypeLink, Linkname: "a"}, &tar.Header{Name: "a", Typeflag: tar.TypeFifo}))
	f.Add(seed(&tar.Header{Name: "../up", Typeflag: tar.TypeReg, Size: 1}, &tar.Header{Name: "/abs", Typeflag: tar.TypeReg, Size: 1}))
	f.Add(gnuSparse(1<<33 - 1)) // 8 GiB declared, one byte of data
	base := f.TempDir()
	f.Fuzz(func(t *testing.T, archive []byte) {
		work, err := os.MkdirTemp(base, "run")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(work)
		dst := filepath.Join(work, "dst")
		if err := os.Mkdir(dst, 0o755); err != nil {
			t.Fatal(err)
		}
		fd := openDir(t, dst)
		u := Unpacker{MaxBytes: 1 << 20, MaxEntries: 64, MaxDepth: 16}
		u.Unpack(context.Background(), bytes.NewReader(archive), fd)
		if ents, _ := os.ReadDir(work); len(ents) != 1 {
			t.Fatalf("the restore made %v beside its directory", ents)
		}
		var data int64
		seen := map[uint64]bool{} // a file of several names counts once
		filepath.WalkDir(dst, func(_ string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				if st, err := d.Info(); err == nil && !seen[st.Sys().(*syscall.Stat_t).Ino] {
					seen[st.Sys().(*syscall.Stat_t).Ino] = true
					data += st.Size()
				}
			}
			return nil
		})
		if data > u.MaxBytes {
			t.Fatalf("%d bytes of file data restored, past a budget of %d", data, u.MaxBytes)
		}
	})
}
