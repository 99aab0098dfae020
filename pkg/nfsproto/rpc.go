package nfsproto

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The NFS program, its version 4 and its procedures.
const (
	Program       = 100003
	Version       = 4
	ProcNull      = 0
	ProcCompound  = 1
	rpcVersion    = 2
	msgCall       = 0
	msgReply      = 1
	authNone      = 0
	authSys       = 1
	lastFragment  = 1 << 31
	maxMachine    = 255
	maxGroups     = 16
	maxAuthLength = 400
)

// MaxFragment is the largest record fragment nfsdir accepts from a server;
// its own calls are far below it.
const MaxFragment = 1 << 20

// Cred is an AUTH_SYS credential (RFC 5531, appendix A).
type Cred struct {
	Machine  string
	UID, GID uint32
	Groups   []uint32
}

func (c Cred) encode(e *Encoder) {
	var body Encoder
	body.Uint32(0) // stamp
	m := c.Machine
	if len(m) > maxMachine {
		m = m[:maxMachine]
	}
	body.String(m)
	body.Uint32(c.UID)
	body.Uint32(c.GID)
	g := c.Groups
	if len(g) > maxGroups {
		g = g[:maxGroups]
	}
	body.Uint32(uint32(len(g)))
	for _, id := range g {
		body.Uint32(id)
	}
	e.Uint32(authSys)
	e.Opaque(body.Bytes())
}

// Call returns the record (one fragment, its header included) of the RPC
// call xid of the NFS procedure proc with args, made as cred.
func Call(xid, proc uint32, cred Cred, args []byte) []byte {
	e := Encoder{b: make([]byte, 4, 4+64+len(args))}
	e.Uint32(xid)
	e.Uint32(msgCall)
	e.Uint32(rpcVersion)
	e.Uint32(Program)
	e.Uint32(Version)
	e.Uint32(proc)
	cred.encode(&e)
	e.Uint32(authNone) // verifier
	e.Uint32(0)
	e.b = append(e.b, args...)
	binary.BigEndian.PutUint32(e.b, uint32(len(e.b)-4)|lastFragment)
	return e.b
}

// Fragment reads a record-marking header: the fragment's length and
// whether it is the record's last.
func Fragment(h [4]byte) (n int, last bool, err error) {
	v := binary.BigEndian.Uint32(h[:])
	n = int(v &^ lastFragment)
	if n > MaxFragment {
		return 0, false, fmt.Errorf("nfsproto: fragment of %d bytes, more than %d", n, MaxFragment)
	}
	return n, v&lastFragment != 0, nil
}

// ReplyXID is the xid of a reply record, to match it with its call.
func ReplyXID(rec []byte) (uint32, error) {
	if len(rec) < 8 {
		return 0, ErrShort
	}
	if t := binary.BigEndian.Uint32(rec[4:]); t != msgReply {
		return 0, fmt.Errorf("nfsproto: message type %d where a reply was expected", t)
	}
	return binary.BigEndian.Uint32(rec), nil
}

// ErrNotSent is a COMPOUND that never reached the server: none of its
// operations ran.
var ErrNotSent = errors.New("not sent to the NFS server")

// ErrRPC is a call the server's RPC layer refused: the NFS program never
// ran it.
var ErrRPC = errors.New("nfsproto: call refused")

// Reply checks the RPC header of a reply record and returns the
// procedure's results.
func Reply(rec []byte) ([]byte, error) {
	d := NewDecoder(rec)
	d.Uint32() // xid
	if t := d.Uint32(); t != msgReply && d.Err() == nil {
		return nil, fmt.Errorf("nfsproto: message type %d where a reply was expected", t)
	}
	switch stat := d.Uint32(); {
	case d.Err() != nil:
		return nil, d.Err()
	case stat == 1: // MSG_DENIED
		why := d.Uint32()
		if why == 0 {
			return nil, fmt.Errorf("%w: RPC version mismatch", ErrRPC)
		}
		return nil, fmt.Errorf("%w: authentication error %d (the export may refuse AUTH_SYS)", ErrRPC, d.Uint32())
	case stat != 0:
		return nil, fmt.Errorf("nfsproto: reply status %d", stat)
	}
	d.Uint32()              // verifier flavor
	d.Opaque(maxAuthLength) // verifier body
	switch acc := d.Uint32(); {
	case d.Err() != nil:
		return nil, d.Err()
	case acc == 0:
		return d.b, nil
	case acc == 2:
		lo, hi := d.Uint32(), d.Uint32()
		return nil, fmt.Errorf("%w: the server speaks NFS versions %d to %d", ErrRPC, lo, hi)
	default:
		return nil, fmt.Errorf("%w: accept status %d", ErrRPC, acc)
	}
}
