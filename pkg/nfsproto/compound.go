package nfsproto

import "fmt"

// Protocol limits nfsdir holds replies to.
const (
	MaxFH       = 128      // NFS4_FHSIZE
	maxName     = 4096     // a component or link text
	maxTag      = 1024     // a COMPOUND's tag
	maxOwner    = 1024     // NFS4_OPAQUE_LIMIT
	maxAttrVals = 64 << 10 // the values of one fattr4
	maxOps      = 64       // operations in one COMPOUND nfsdir sends
)

// Object types (nfs_ftype4).
const (
	TypeRegular = 1
	TypeDir     = 2
	TypeLink    = 5
)

// Attributes nfsdir reads or sets.
const (
	AttrType       = 1
	AttrChange     = 3
	AttrSize       = 4
	AttrFSID       = 8
	AttrFilehandle = 19
	AttrFileID     = 20
	AttrMode       = 33
	AttrNumLinks   = 35
)

// Op is one operation of a COMPOUND: its arguments are set before the
// call, its results are filled in by DecodeCompound.
type Op interface {
	OpName() string
	code() uint32
	encode(e *Encoder)
	// decode reads the operation's result, whose status is st.
	decode(d *Decoder, st Status)
}

// EncodeCompound returns the arguments of an NFSv4.1 COMPOUND of ops.
func EncodeCompound(tag string, ops []Op) []byte {
	var e Encoder
	e.String(tag)
	e.Uint32(1) // minor version
	e.Uint32(uint32(len(ops)))
	for _, op := range ops {
		e.Uint32(op.code())
		op.encode(&e)
	}
	return e.Bytes()
}

// DecodeCompound reads the results of a COMPOUND of ops into them. It
// returns an *OpError when the server stopped at a failed operation, and
// another error when the reply is not one of these ops.
func DecodeCompound(res []byte, ops []Op) error {
	d := NewDecoder(res)
	status := Status(d.Uint32())
	d.Opaque(maxTag)
	n := d.Count(len(ops), 8)
	if d.Err() != nil {
		return d.Err()
	}
	for i := 0; i < n; i++ {
		if c := d.Uint32(); c != ops[i].code() && d.Err() == nil {
			return fmt.Errorf("nfsproto: result %d is of operation %d, not %s", i, c, ops[i].OpName())
		}
		st := Status(d.Uint32())
		ops[i].decode(d, st)
		if d.Err() != nil {
			return fmt.Errorf("nfsproto: result of %s: %w", ops[i].OpName(), d.Err())
		}
		if st != OK {
			return &OpError{Index: i, Op: ops[i].OpName(), Status: st}
		}
	}
	if status != OK {
		return fmt.Errorf("nfsproto: COMPOUND failed with %s after %d of %d operations", status, n, len(ops))
	}
	if n != len(ops) {
		return fmt.Errorf("nfsproto: %d results for %d operations", n, len(ops))
	}
	return nil
}

// Attrs are the attributes of a GETATTR nfsdir reads.
type Attrs struct {
	Type     uint32
	Change   uint64
	Size     uint64
	FSID     [2]uint64
	FileID   uint64
	Mode     uint32
	NumLinks uint32
}

// decodeAttrs reads a fattr4 holding only attributes of Attrs.
func decodeAttrs(d *Decoder, a *Attrs) {
	mask := d.Bitmap()
	v := NewDecoder(d.Opaque(maxAttrVals))
	if d.Err() != nil {
		return
	}
	for w, bits := range mask {
		for b := uint32(0); b < 32; b++ {
			if bits&(1<<b) == 0 {
				continue
			}
			switch attr := uint32(w)*32 + b; attr {
			case AttrType:
				a.Type = v.Uint32()
			case AttrChange:
				a.Change = v.Uint64()
			case AttrSize:
				a.Size = v.Uint64()
			case AttrFSID:
				a.FSID = [2]uint64{v.Uint64(), v.Uint64()}
			case AttrFileID:
				a.FileID = v.Uint64()
			case AttrMode:
				a.Mode = v.Uint32()
			case AttrNumLinks:
				a.NumLinks = v.Uint32()
			default:
				d.fail(fmt.Errorf("nfsproto: attribute %d was not asked for", attr))
				return
			}
		}
	}
	if v.Err() != nil {
		d.fail(v.Err())
	}
}

// Sequence opens every COMPOUND of a session (RFC 8881, 18.46).
type Sequence struct {
	Session   [16]byte
	SeqID     uint32
	Slot      uint32
	MaxSlot   uint32 // the highest slot the client uses
	CacheThis bool
	// Results.
	TargetMaxSlot uint32
	StatusFlags   uint32
}

func (*Sequence) OpName() string { return "SEQUENCE" }
func (*Sequence) code() uint32   { return 53 }
func (o *Sequence) encode(e *Encoder) {
	e.Fixed(o.Session[:])
	e.Uint32(o.SeqID)
	e.Uint32(o.Slot)
	e.Uint32(o.MaxSlot)
	e.Bool(o.CacheThis)
}
func (o *Sequence) decode(d *Decoder, st Status) {
	if st != OK {
		return
	}
	d.Fixed(16)
	d.Uint32() // sequence
	d.Uint32() // slot
	d.Uint32() // highest slot
	o.TargetMaxSlot = d.Uint32()
	o.StatusFlags = d.Uint32()
}

// PutFH makes FH the current filehandle.
type PutFH struct{ FH []byte }

func (*PutFH) OpName() string          { return "PUTFH" }
func (*PutFH) code() uint32            { return 22 }
func (o *PutFH) encode(e *Encoder)     { e.Opaque(o.FH) }
func (*PutFH) decode(*Decoder, Status) {}

// PutRootFH makes the server's root the current filehandle.
type PutRootFH struct{}

func (*PutRootFH) OpName() string          { return "PUTROOTFH" }
func (*PutRootFH) code() uint32            { return 24 }
func (*PutRootFH) encode(*Encoder)         {}
func (*PutRootFH) decode(*Decoder, Status) {}

// SaveFH saves the current filehandle.
type SaveFH struct{}

func (*SaveFH) OpName() string          { return "SAVEFH" }
func (*SaveFH) code() uint32            { return 32 }
func (*SaveFH) encode(*Encoder)         {}
func (*SaveFH) decode(*Decoder, Status) {}

// RestoreFH makes the saved filehandle current.
type RestoreFH struct{}

func (*RestoreFH) OpName() string          { return "RESTOREFH" }
func (*RestoreFH) code() uint32            { return 31 }
func (*RestoreFH) encode(*Encoder)         {}
func (*RestoreFH) decode(*Decoder, Status) {}

// Lookup makes Name, in the current directory, current; it never follows
// a symlink: the link itself becomes current.
type Lookup struct{ Name string }

func (o *Lookup) OpName() string        { return "LOOKUP" }
func (*Lookup) code() uint32            { return 15 }
func (o *Lookup) encode(e *Encoder)     { e.String(o.Name) }
func (*Lookup) decode(*Decoder, Status) {}

// GetFH returns the current filehandle.
type GetFH struct{ FH []byte }

func (*GetFH) OpName() string  { return "GETFH" }
func (*GetFH) code() uint32    { return 10 }
func (*GetFH) encode(*Encoder) {}
func (o *GetFH) decode(d *Decoder, st Status) {
	if st == OK {
		o.FH = d.Opaque(MaxFH)
	}
}

// GetAttr reads attributes of the current filehandle.
type GetAttr struct {
	Want []uint32
	Attrs
}

func (*GetAttr) OpName() string      { return "GETATTR" }
func (*GetAttr) code() uint32        { return 9 }
func (o *GetAttr) encode(e *Encoder) { e.Bitmap(o.Want...) }
func (o *GetAttr) decode(d *Decoder, st Status) {
	if st == OK {
		decodeAttrs(d, &o.Attrs)
	}
}

// modeAttrs encodes a fattr4 setting mode, or no attribute when mode is nil.
func modeAttrs(e *Encoder, mode *uint32) {
	if mode == nil {
		e.Uint32(0)
		e.Uint32(0)
		return
	}
	e.Bitmap(AttrMode)
	var v Encoder
	v.Uint32(*mode)
	e.Opaque(v.Bytes())
}

// Create makes a directory or a symlink (Type) named Name in the current
// directory, which it makes the current filehandle; Mode, when set, is the
// new object's mode, set by the server as it creates it (no umask).
type Create struct {
	Type uint32
	Link string // a symlink's text
	Name string
	Mode *uint32
	// Result: the attributes the server set.
	AttrSet []uint32
}

func (o *Create) OpName() string { return "CREATE" }
func (*Create) code() uint32     { return 6 }
func (o *Create) encode(e *Encoder) {
	e.Uint32(o.Type)
	if o.Type == TypeLink {
		e.String(o.Link)
	}
	e.String(o.Name)
	modeAttrs(e, o.Mode)
}
func (o *Create) decode(d *Decoder, st Status) {
	if st != OK {
		return
	}
	decodeChange(d)
	o.AttrSet = d.Bitmap()
}

// decodeChange reads a change_info4.
func decodeChange(d *Decoder) {
	d.Bool()
	d.Uint64()
	d.Uint64()
}

// Rename renames Old in the saved directory to New in the current one.
type Rename struct{ Old, New string }

func (*Rename) OpName() string { return "RENAME" }
func (*Rename) code() uint32   { return 29 }
func (o *Rename) encode(e *Encoder) {
	e.String(o.Old)
	e.String(o.New)
}
func (*Rename) decode(d *Decoder, st Status) {
	if st == OK {
		decodeChange(d)
		decodeChange(d)
	}
}

// Remove removes Target (a non-directory, or an empty directory) from the
// current directory.
type Remove struct{ Target string }

func (*Remove) OpName() string      { return "REMOVE" }
func (*Remove) code() uint32        { return 28 }
func (o *Remove) encode(e *Encoder) { e.String(o.Target) }
func (*Remove) decode(d *Decoder, st Status) {
	if st == OK {
		decodeChange(d)
	}
}

// ReadLink reads the current filehandle's symlink text.
type ReadLink struct{ Link string }

func (*ReadLink) OpName() string  { return "READLINK" }
func (*ReadLink) code() uint32    { return 27 }
func (*ReadLink) encode(*Encoder) {}
func (o *ReadLink) decode(d *Decoder, st Status) {
	if st == OK {
		o.Link = d.String(maxName)
	}
}

// Verify lets the COMPOUND go on only when the current filehandle is
// FH, of type Type and fileid FileID (VERIFY of the filehandle, type and
// fileid attributes); otherwise it stops with NFS4ERR_NOT_SAME.
type Verify struct {
	Type   uint32
	FH     []byte
	FileID uint64
}

func (*Verify) OpName() string { return "VERIFY" }
func (*Verify) code() uint32   { return 37 }
func (o *Verify) encode(e *Encoder) {
	e.Bitmap(AttrType, AttrFilehandle, AttrFileID)
	var v Encoder
	v.Uint32(o.Type)
	v.Opaque(o.FH)
	v.Uint64(o.FileID)
	e.Opaque(v.Bytes())
}
func (*Verify) decode(*Decoder, Status) {}

// SetMode sets the current filehandle's mode (SETATTR with the anonymous
// stateid).
type SetMode struct{ Mode uint32 }

func (*SetMode) OpName() string { return "SETATTR" }
func (*SetMode) code() uint32   { return 34 }
func (o *SetMode) encode(e *Encoder) {
	e.Uint32(0)
	e.Fixed(make([]byte, 12))
	modeAttrs(e, &o.Mode)
}
func (*SetMode) decode(d *Decoder, _ Status) { d.Bitmap() } // present whatever the status

// ExchangeID makes or finds the client ID of Owner (RFC 8881, 18.35).
type ExchangeID struct {
	Verifier [8]byte
	Owner    []byte
	// Results.
	ClientID uint64
	SeqID    uint32
	Flags    uint32
}

func (*ExchangeID) OpName() string { return "EXCHANGE_ID" }
func (*ExchangeID) code() uint32   { return 42 }
func (o *ExchangeID) encode(e *Encoder) {
	e.Fixed(o.Verifier[:])
	e.Opaque(o.Owner)
	e.Uint32(0) // flags: the server picks its role
	e.Uint32(0) // SP4_NONE
	e.Uint32(0) // no implementation ID
}
func (o *ExchangeID) decode(d *Decoder, st Status) {
	if st != OK {
		return
	}
	o.ClientID = d.Uint64()
	o.SeqID = d.Uint32()
	o.Flags = d.Uint32()
	if how := d.Uint32(); how != 0 && d.Err() == nil {
		d.fail(fmt.Errorf("nfsproto: state protection %d, which nfsdir did not ask for", how))
		return
	}
	d.Uint64()         // server owner: minor ID
	d.Opaque(maxOwner) // major ID
	d.Opaque(maxOwner) // server scope
	for range d.Count(1, 20) {
		d.Opaque(maxOwner) // domain
		d.Opaque(maxOwner) // name
		d.Uint64()         // date
		d.Uint32()
	}
}

// ChannelAttrs are a session channel's limits.
type ChannelAttrs struct {
	MaxRequestSize, MaxResponseSize, MaxResponseCached, MaxOps, MaxRequests uint32
}

func (c ChannelAttrs) encode(e *Encoder) {
	e.Uint32(0) // header padding
	e.Uint32(c.MaxRequestSize)
	e.Uint32(c.MaxResponseSize)
	e.Uint32(c.MaxResponseCached)
	e.Uint32(c.MaxOps)
	e.Uint32(c.MaxRequests)
	e.Uint32(0) // no RDMA
}

func (c *ChannelAttrs) decode(d *Decoder) {
	d.Uint32()
	c.MaxRequestSize = d.Uint32()
	c.MaxResponseSize = d.Uint32()
	c.MaxResponseCached = d.Uint32()
	c.MaxOps = d.Uint32()
	c.MaxRequests = d.Uint32()
	for range d.Count(1, 4) {
		d.Uint32()
	}
}

// CreateSession makes a session of ClientID (RFC 8881, 18.36), with no
// back channel use.
type CreateSession struct {
	ClientID uint64
	SeqID    uint32
	Fore     ChannelAttrs
	// Results.
	Session     [16]byte
	ForeGranted ChannelAttrs
}

func (*CreateSession) OpName() string { return "CREATE_SESSION" }
func (*CreateSession) code() uint32   { return 43 }
func (o *CreateSession) encode(e *Encoder) {
	e.Uint64(o.ClientID)
	e.Uint32(o.SeqID)
	e.Uint32(0) // flags: not persistent, no back channel on this connection
	o.Fore.encode(e)
	ChannelAttrs{MaxRequestSize: 4096, MaxResponseSize: 4096, MaxOps: 2, MaxRequests: 1}.encode(e)
	e.Uint32(0x40000000) // callback program, never used
	e.Uint32(1)          // one callback security flavor:
	e.Uint32(authNone)
}
func (o *CreateSession) decode(d *Decoder, st Status) {
	if st != OK {
		return
	}
	copy(o.Session[:], d.Fixed(16))
	d.Uint32() // sequence
	d.Uint32() // flags
	o.ForeGranted.decode(d)
	var back ChannelAttrs
	back.decode(d)
}

// DestroySession ends a session.
type DestroySession struct{ Session [16]byte }

func (*DestroySession) OpName() string          { return "DESTROY_SESSION" }
func (*DestroySession) code() uint32            { return 44 }
func (o *DestroySession) encode(e *Encoder)     { e.Fixed(o.Session[:]) }
func (*DestroySession) decode(*Decoder, Status) {}

// DestroyClientID ends a client ID that has no session left.
type DestroyClientID struct{ ClientID uint64 }

func (*DestroyClientID) OpName() string          { return "DESTROY_CLIENTID" }
func (*DestroyClientID) code() uint32            { return 57 }
func (o *DestroyClientID) encode(e *Encoder)     { e.Uint64(o.ClientID) }
func (*DestroyClientID) decode(*Decoder, Status) {}

// ReclaimComplete tells the server the client reclaims no state.
type ReclaimComplete struct{}

func (*ReclaimComplete) OpName() string          { return "RECLAIM_COMPLETE" }
func (*ReclaimComplete) code() uint32            { return 58 }
func (*ReclaimComplete) encode(e *Encoder)       { e.Bool(false) }
func (*ReclaimComplete) decode(*Decoder, Status) {}
