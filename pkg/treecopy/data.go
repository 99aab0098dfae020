package treecopy

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"golang.org/x/sys/unix"
)

// copyFile copies the data of j, then its attributes.
func (r *copyRun) copyFile(ctx context.Context, j job) error {
	if err := r.copyData(ctx, j); err != nil {
		return fmt.Errorf("copy %q: %w", j.dir.path(j.name), err)
	}
	if err := r.setAttrs(j.src, j.dst, &j.st); err != nil {
		return fmt.Errorf("%q: %w", j.dir.path(j.name), err)
	}
	return nil
}

// unsupported tells whether err says a method cannot copy between these
// two files (another may).
func unsupported(err error) bool {
	return errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EXDEV) ||
		errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.ENOTTY) || errors.Is(err, unix.EBADF)
}

func (r *copyRun) copyData(ctx context.Context, j job) error {
	sfd, dfd := j.src, j.dst
	if j.st.Size == 0 {
		r.methods[Clone].Add(1) // nothing to move: counted with the cheapest
		return nil
	}
	if !r.unsupported[Clone].Load() {
		err := unix.IoctlFileClone(dfd, sfd)
		if err == nil {
			r.methods[Clone].Add(1)
			r.addBytes(min(j.st.Size, j.st.Blocks*512))
			return nil
		}
		if !unsupported(err) {
			return err
		}
		r.unsupported[Clone].Store(true)
	}
	m := CopyRange
	// Holes are looked for only in a file that has some (fewer blocks
	// than its size): on NFSv4.2 each look is a SEEK call. A sparse file
	// whose holes the file system cannot point out (NFS before 4.2 has no
	// SEEK) is read here, and blocks of zeros are left unwritten, or the
	// copy would fill every hole.
	sparse := j.st.Blocks*512 < j.st.Size
	blind := sparse && !holesKnown(sfd, j.st.Size)
	if r.unsupported[CopyRange].Load() || blind {
		m = ReadWrite
	}
	for {
		n, err := r.extents(ctx, sfd, dfd, j.st.Size, m, sparse, blind)
		if err != nil && m == CopyRange && unsupported(err) {
			r.unsupported[CopyRange].Store(true)
			if _, err := unix.Seek(dfd, 0, io.SeekStart); err != nil {
				return err
			}
			if err := unix.Ftruncate(dfd, 0); err != nil {
				return err
			}
			m = ReadWrite
			continue
		}
		if err != nil {
			return err
		}
		r.methods[m].Add(1)
		r.addBytes(n)
		if !sparse {
			return nil
		}
		// Holes at the end: the size comes from the source.
		return unix.Ftruncate(dfd, j.st.Size)
	}
}

// extents copies each extent of data of the source (SEEK_DATA/SEEK_HOLE,
// for a sparse file; a file system without them has one extent: the whole
// file) to the same offset of the copy, with method m, and returns the
// bytes copied.
func (r *copyRun) extents(ctx context.Context, sfd, dfd int, size int64, m Method, sparse, skipZeros bool) (int64, error) {
	if !sparse {
		return r.copyExtent(ctx, sfd, dfd, 0, size, m, false)
	}
	var total int64
	for off := int64(0); off < size; {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		data, err := unix.Seek(sfd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole is left
		}
		if err != nil {
			data = off // no SEEK_DATA: all data
		}
		hole, err := unix.Seek(sfd, data, unix.SEEK_HOLE)
		if err != nil || hole > size {
			hole = size
		}
		if hole <= data {
			break
		}
		n, err := r.copyExtent(ctx, sfd, dfd, data, hole-data, m, skipZeros)
		total += n
		if err != nil {
			return total, err
		}
		off = hole
	}
	return total, nil
}

// copyExtent copies length bytes at off of the source to off of the copy
// and returns the bytes of data it wrote (with skipZeros, blocks of zeros
// are left as holes and not counted).
func (r *copyRun) copyExtent(ctx context.Context, sfd, dfd int, off, length int64, m Method, skipZeros bool) (int64, error) {
	var pos, copied int64
	buf := []byte(nil)
	for pos < length {
		if err := ctx.Err(); err != nil {
			return copied, err
		}
		chunk := min(length-pos, 1<<30)
		var n, written int
		var err error
		if m == CopyRange {
			so, do := off+pos, off+pos
			n, err = unix.CopyFileRange(sfd, &so, dfd, &do, int(chunk), 0)
			written = n
		} else {
			if buf == nil {
				buf = make([]byte, max(r.c.Buffer, blockSize))
			}
			n, err = unix.Pread(sfd, buf[:min(int64(len(buf)), chunk)], off+pos)
			if n > 0 {
				var werr error
				if written, werr = writeAt(dfd, buf[:n], off+pos, skipZeros); werr != nil {
					return copied, werr
				}
			}
		}
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return copied, err
		}
		if n == 0 {
			break // the source shrank meanwhile
		}
		pos += int64(n)
		copied += int64(written)
	}
	return copied, nil
}

// blockSize is the granularity at which blocks of zeros are left as holes.
const blockSize = 4096

// writeAt writes b at off of fd; with skipZeros, blocks of zeros are
// skipped (left as holes: the caller sets the size at the end). It returns
// the bytes written.
func writeAt(fd int, b []byte, off int64, skipZeros bool) (int, error) {
	if !skipZeros {
		return pwriteAll(fd, b, off)
	}
	written := 0
	for start := 0; start < len(b); {
		// A run of blocks with data, from start to end.
		end := start
		for end < len(b) && !allZero(b[end:min(end+blockSize, len(b))]) {
			end = min(end+blockSize, len(b))
		}
		if end > start {
			n, err := pwriteAll(fd, b[start:end], off+int64(start))
			written += n
			if err != nil {
				return written, err
			}
		}
		start = min(end+blockSize, len(b)) // skip the zero block at end
	}
	return written, nil
}

func allZero(b []byte) bool {
	for len(b) >= 8 {
		if binary.NativeEndian.Uint64(b) != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func pwriteAll(fd int, b []byte, off int64) (int, error) {
	total := 0
	for len(b) > 0 {
		n, err := unix.Pwrite(fd, b, off)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return total, err
		}
		total += n
		b, off = b[n:], off+int64(n)
	}
	return total, nil
}

// holesKnown tells whether the file system points out fd's holes: a file
// that stat says is sparse, but that SEEK_DATA and SEEK_HOLE show as one
// extent of data from start to end, is on one that does not.
func holesKnown(fd int, size int64) bool {
	data, err := unix.Seek(fd, 0, unix.SEEK_DATA)
	if errors.Is(err, unix.ENXIO) {
		return true // all hole
	}
	if err != nil {
		return false
	}
	hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
	return err == nil && (data > 0 || hole < size)
}
