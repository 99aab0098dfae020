package nfsproto

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io/fs"
	"slices"
	"testing"
)

func words(b []byte) []uint32 {
	w := make([]uint32, len(b)/4)
	for i := range w {
		w[i] = binary.BigEndian.Uint32(b[4*i:])
	}
	return w
}

func TestCreateOfALinkWithAMode(t *testing.T) {
	mode := uint32(0o500)
	got := words(EncodeCompound("", []Op{&Create{Type: TypeLink, Link: "ab", Name: "rec", Mode: &mode}}))
	want := []uint32{
		0, // tag
		1, // minor version
		1, // one operation
		6, // CREATE
		5, // NF4LNK
		2, 0x61620000,
		3, 0x72656300,
		2, 0, 2, // bitmap: attribute 33 is bit 1 of word 1
		4, 0o500,
	}
	if !slices.Equal(got, want) {
		t.Errorf("CREATE encodes as %v, want %v", got, want)
	}
}

func TestCallCarriesAUTHSYSAndOneFragment(t *testing.T) {
	rec := Call(7, ProcCompound, Cred{Machine: "h", UID: 1000, GID: 100, Groups: []uint32{5}}, []byte{1, 2, 3, 4})
	w := words(rec)
	if w[0] != 1<<31|uint32(len(rec)-4) {
		t.Errorf("record mark %#x for a %d-byte call", w[0], len(rec)-4)
	}
	want := []uint32{7, 0, 2, Program, 4, 1, 1, 28, 0, 1, 0x68000000, 1000, 100, 1, 5, 0, 0, 0x01020304}
	if !slices.Equal(w[1:], want) {
		t.Errorf("call %v, want %v", w[1:], want)
	}
}

// reply builds the results of a COMPOUND as a server would.
type reply struct{ Encoder }

func (r *reply) op(code uint32, st Status) { r.Uint32(code); r.Uint32(uint32(st)) }

func TestDecodeCompoundFillsResultsAndStopsAtTheFailure(t *testing.T) {
	var r reply
	r.Uint32(uint32(ErrExist))
	r.String("nfsdir")
	r.Uint32(5)
	r.op(53, OK)
	r.Fixed(make([]byte, 16))
	for _, v := range []uint32{1, 0, 0, 3, 0} {
		r.Uint32(v)
	}
	r.op(6, OK)
	r.Bool(true)
	r.Uint64(1)
	r.Uint64(2)
	r.Bitmap(AttrMode)
	r.op(10, OK)
	r.Opaque([]byte{9, 8, 7})
	r.op(9, OK)
	r.Bitmap(AttrType, AttrFileID, AttrMode)
	var v Encoder
	v.Uint32(TypeDir)
	v.Uint64(42)
	v.Uint32(0o500)
	r.Opaque(v.Bytes())
	// The fifth operation failed: EXIST, and no result for the sixth.
	r.op(6, ErrExist)
	seq, create, fh, attrs := &Sequence{}, &Create{Type: TypeDir, Name: "v"}, &GetFH{}, &GetAttr{}
	ops := []Op{seq, create, fh, attrs, &Create{Type: TypeLink, Name: "s"}, &GetFH{}}
	err := DecodeCompound(r.Bytes(), ops)
	var oe *OpError
	if !errors.As(err, &oe) || oe.Index != 4 || oe.Status != ErrExist || oe.Op != "CREATE" {
		t.Fatalf("decode: %v, want CREATE failing with NFS4ERR_EXIST at 4", err)
	}
	if seq.TargetMaxSlot != 3 || !slices.Equal(create.AttrSet, []uint32{0, 2}) || !bytes.Equal(fh.FH, []byte{9, 8, 7}) {
		t.Errorf("results: sequence %+v, create %+v, getfh %v", seq, create, fh.FH)
	}
	if attrs.Type != TypeDir || attrs.FileID != 42 || attrs.Mode != 0o500 {
		t.Errorf("attributes %+v", attrs.Attrs)
	}
}

func TestDecodeCompoundRefusesWhatWasNotAsked(t *testing.T) {
	for name, build := range map[string]func(r *reply){
		"another operation": func(r *reply) { r.op(10, OK); r.Opaque([]byte{1}) },
		"a longer handle":   func(r *reply) { r.op(22, OK); r.op(10, OK); r.Opaque(make([]byte, MaxFH+1)) },
		"an attribute not asked for": func(r *reply) {
			r.op(22, OK)
			r.op(10, OK)
			r.Opaque([]byte{1})
		},
	} {
		var r reply
		r.Uint32(0)
		r.String("")
		r.Uint32(2)
		build(&r)
		if err := DecodeCompound(r.Bytes(), []Op{&PutFH{}, &GetAttr{}}); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
	var r reply
	r.Uint32(0)
	r.String("")
	r.Uint32(1)
	r.op(9, OK)
	r.Bitmap(AttrSize + 1)
	r.Opaque(make([]byte, 8))
	if err := DecodeCompound(r.Bytes(), []Op{&GetAttr{}}); err == nil {
		t.Error("an attribute nfsdir did not ask for decoded")
	}
}

func TestReplyRefusalsSayWhy(t *testing.T) {
	var e Encoder
	for _, v := range []uint32{7, 1, 1, 1, 1} { // denied: AUTH_ERROR, AUTH_BADCRED
		e.Uint32(v)
	}
	if _, err := Reply(e.Bytes()); !errors.Is(err, ErrRPC) {
		t.Errorf("a denied call: %v", err)
	}
	var ok Encoder
	for _, v := range []uint32{7, 1, 0, 0, 0, 0, 0xabcd} {
		ok.Uint32(v)
	}
	res, err := Reply(ok.Bytes())
	if err != nil || !slices.Equal(words(res), []uint32{0xabcd}) {
		t.Errorf("an accepted call: %v, %v", res, err)
	}
}

func FuzzDecodeCompound(f *testing.F) {
	var r reply
	r.Uint32(0)
	r.String("nfsdir")
	r.Uint32(2)
	r.op(53, OK)
	r.Fixed(make([]byte, 36))
	r.op(9, OK)
	r.Bitmap(AttrFileID)
	r.Opaque(make([]byte, 8))
	f.Add(r.Bytes())
	f.Fuzz(func(t *testing.T, b []byte) {
		ops := []Op{&Sequence{}, &GetAttr{}, &ExchangeID{}, &CreateSession{}, &GetFH{}, &ReadLink{}, &Create{}, &Rename{}, &Remove{}, &SetMode{}}
		DecodeCompound(b, ops)
		Reply(b)
		ReplyXID(b)
	})
}

func TestKernelHandleIsTheServersHandleAfterTheFileID(t *testing.T) {
	b := binary.NativeEndian.AppendUint32(nil, 1)
	b = binary.NativeEndian.AppendUint32(b, 2)
	b = binary.NativeEndian.AppendUint32(b, 0o040000)
	b = binary.NativeEndian.AppendUint16(b, 3)
	b = append(b, 7, 8, 9, 0, 0, 0)
	fh, id, ok := KernelHandle(b)
	if !ok || !bytes.Equal(fh, []byte{7, 8, 9}) || id != 1<<32|2 {
		t.Errorf("KernelHandle: %v %d %v", fh, id, ok)
	}
	if _, _, ok := KernelHandle(b[:16]); ok {
		t.Error("a handle cut short read")
	}
}

func FuzzKernelHandle(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 1, 0, 0, 0, 0, 0x40, 0, 0, 1, 0, 5, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		if fh, _, ok := KernelHandle(b); ok && (len(fh) == 0 || len(fh) > MaxFH || len(fh) > len(b)-14) {
			t.Errorf("a %d-byte handle out of %d bytes", len(fh), len(b))
		}
	})
}

func TestKernelHandleOfIsReadBack(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4, 28, 32, MaxFH} {
		fh := bytes.Repeat([]byte{0xab}, n)
		typ, b := KernelHandleOf(fh, 1<<40|7, ModeDir)
		got, id, ok := KernelHandle(b)
		if !ok || !bytes.Equal(got, fh) || id != 1<<40|7 || int(typ)*4 != len(b) || len(b) != 12+4*((2+n+3)/4) {
			t.Errorf("a %d-byte handle: type %d, %d bytes, read back %x %d %v", n, typ, len(b), got, id, ok)
		}
	}
	if err := error(&OpError{Status: ErrExist}); !errors.Is(err, fs.ErrExist) {
		t.Error("NFS4ERR_EXIST is not fs.ErrExist")
	}
}

func TestVerifyOfTheFilehandleTypeAndFileID(t *testing.T) {
	got := words(EncodeCompound("", []Op{&Verify{Type: TypeDir, FH: []byte{1, 2, 3, 4, 5}, FileID: 1<<32 | 9}}))
	want := []uint32{
		0, 1, 1,
		37,                                                 // VERIFY
		1, 1<<AttrType | 1<<AttrFilehandle | 1<<AttrFileID, // one bitmap word
		4 + 4 + 8 + 8, // the values' length
		TypeDir, 5, 0x01020304, 0x05000000, 1, 9,
	}
	if !slices.Equal(got, want) {
		t.Errorf("VERIFY encodes as %v, want %v", got, want)
	}
}
