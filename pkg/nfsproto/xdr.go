// Package nfsproto is the wire format of the NFSv4.1 calls nfsdir sends
// itself (RFC 8881, RFC 5531, RFC 4506): XDR, ONC RPC calls with AUTH_SYS
// credentials and their replies, and COMPOUND requests made of the few
// operations nfsdir needs, with their results. It does no I/O: pkg/nfsclient
// carries the bytes. Every length read from a reply is checked against
// what is left of it and against the protocol's own limit before anything
// is allocated, so a hostile or broken server can make a decode fail, never
// grow memory or panic (FuzzDecodeCompound).
package nfsproto

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Encoder appends XDR items to a buffer.
type Encoder struct{ b []byte }

// Bytes returns what was encoded.
func (e *Encoder) Bytes() []byte { return e.b }

// Uint32 encodes an unsigned int.
func (e *Encoder) Uint32(v uint32) { e.b = binary.BigEndian.AppendUint32(e.b, v) }

// Uint64 encodes an unsigned hyper.
func (e *Encoder) Uint64(v uint64) { e.b = binary.BigEndian.AppendUint64(e.b, v) }

// Bool encodes a bool.
func (e *Encoder) Bool(v bool) {
	if v {
		e.Uint32(1)
	} else {
		e.Uint32(0)
	}
}

// Fixed encodes fixed-length opaque data, padded to four bytes.
func (e *Encoder) Fixed(p []byte) {
	e.b = append(e.b, p...)
	e.b = append(e.b, make([]byte, pad(len(p)))...)
}

// Opaque encodes variable-length opaque data.
func (e *Encoder) Opaque(p []byte) {
	e.Uint32(uint32(len(p)))
	e.Fixed(p)
}

// String encodes a string.
func (e *Encoder) String(s string) { e.Opaque([]byte(s)) }

// Bitmap encodes a bitmap4 with the given attribute numbers set.
func (e *Encoder) Bitmap(attrs ...uint32) {
	var words []uint32
	for _, a := range attrs {
		for int(a/32) >= len(words) {
			words = append(words, 0)
		}
		words[a/32] |= 1 << (a % 32)
	}
	e.Uint32(uint32(len(words)))
	for _, w := range words {
		e.Uint32(w)
	}
}

func pad(n int) int { return (4 - n%4) % 4 }

// ErrShort is a decode that ran past the end of its data.
var ErrShort = errors.New("nfsproto: reply too short")

// Decoder reads XDR items; the first error sticks, and every later read
// returns zero values.
type Decoder struct {
	b   []byte
	err error
}

// NewDecoder reads b.
func NewDecoder(b []byte) *Decoder { return &Decoder{b: b} }

// Err is the first error met, or nil.
func (d *Decoder) Err() error { return d.err }

// Left is how many bytes are left.
func (d *Decoder) Left() int { return len(d.b) }

func (d *Decoder) fail(err error) {
	if d.err == nil {
		d.err = err
	}
	d.b = nil
}

func (d *Decoder) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || n > len(d.b) {
		d.fail(ErrShort)
		return nil
	}
	p := d.b[:n:n]
	d.b = d.b[n:]
	return p
}

// Uint32 decodes an unsigned int.
func (d *Decoder) Uint32() uint32 {
	p := d.take(4)
	if p == nil {
		return 0
	}
	return binary.BigEndian.Uint32(p)
}

// Uint64 decodes an unsigned hyper.
func (d *Decoder) Uint64() uint64 {
	p := d.take(8)
	if p == nil {
		return 0
	}
	return binary.BigEndian.Uint64(p)
}

// Bool decodes a bool.
func (d *Decoder) Bool() bool {
	v := d.Uint32()
	if v > 1 {
		d.fail(fmt.Errorf("nfsproto: bool %d", v))
	}
	return v == 1
}

// Fixed decodes n bytes of fixed-length opaque data and their padding.
func (d *Decoder) Fixed(n int) []byte {
	p := d.take(n)
	d.take(pad(n))
	if d.err != nil {
		return nil
	}
	return p
}

// Opaque decodes variable-length opaque data of at most limit bytes.
func (d *Decoder) Opaque(limit int) []byte {
	n := d.Uint32()
	if d.err != nil {
		return nil
	}
	if int64(n) > int64(limit) {
		d.fail(fmt.Errorf("nfsproto: %d bytes where at most %d may be", n, limit))
		return nil
	}
	return d.Fixed(int(n))
}

// String decodes a string of at most limit bytes.
func (d *Decoder) String(limit int) string { return string(d.Opaque(limit)) }

// Count decodes an array's length, failing when it is above limit or when
// what is left could not hold that many items of at least minSize bytes.
func (d *Decoder) Count(limit, minSize int) int {
	n := d.Uint32()
	if d.err != nil {
		return 0
	}
	if int64(n) > int64(limit) || int64(n)*int64(minSize) > int64(len(d.b)) {
		d.fail(fmt.Errorf("nfsproto: array of %d items", n))
		return 0
	}
	return int(n)
}

// Bitmap decodes a bitmap4 (at most 8 words).
func (d *Decoder) Bitmap() []uint32 {
	n := d.Count(8, 4)
	words := make([]uint32, n)
	for i := range words {
		words[i] = d.Uint32()
	}
	return words
}
