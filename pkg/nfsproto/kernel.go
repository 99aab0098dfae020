package nfsproto

import "encoding/binary"

// KernelHandle reads the handle Linux's NFS client gives name_to_handle_at
// for a file on an NFS mount (fs/nfs/export.c, nfs_encode_fh): the file's
// fileid, its type, then the server's own filehandle, in host byte order.
// It returns that filehandle and the fileid, or ok false when b is not of
// that shape.
func KernelHandle(b []byte) (fh []byte, fileid uint64, ok bool) {
	const embed = 12 // three 32-bit words before the server's handle
	if len(b) < embed+2 {
		return nil, 0, false
	}
	n := int(binary.NativeEndian.Uint16(b[embed:]))
	if n == 0 || n > MaxFH || embed+2+n > len(b) {
		return nil, 0, false
	}
	fileid = uint64(binary.NativeEndian.Uint32(b))<<32 | uint64(binary.NativeEndian.Uint32(b[4:]))
	return append([]byte(nil), b[embed+2:embed+2+n]...), fileid, true
}
