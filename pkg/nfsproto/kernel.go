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

// ModeDir is the type bits of a directory, as KernelHandleOf takes them.
const ModeDir = 0o040000

// KernelHandleOf is the handle Linux's NFS client gives name_to_handle_at
// for the file of server filehandle fh, fileid fileid and type bits
// typeBits (ModeDir for a directory), with its handle type: what
// KernelHandle reads back.
func KernelHandleOf(fh []byte, fileid uint64, typeBits uint32) (handleType int32, b []byte) {
	b = binary.NativeEndian.AppendUint32(nil, uint32(fileid>>32))
	b = binary.NativeEndian.AppendUint32(b, uint32(fileid))
	b = binary.NativeEndian.AppendUint32(b, typeBits)
	b = binary.NativeEndian.AppendUint16(b, uint16(len(fh)))
	b = append(b, fh...)
	b = append(b, make([]byte, pad(len(b)))...)
	return int32(len(b) / 4), b
}
