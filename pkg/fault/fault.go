// Package fault classifies domain errors so that the gRPC layer can map them
// to CSI status codes without inspecting error text. Domain packages return
// errors built with New or Wrap; anything else is treated as Internal.
package fault

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"syscall"
)

// Kind is the class of a failure, named after the CSI status it maps to.
type Kind int

// The kinds a domain error can have.
const (
	Internal Kind = iota
	InvalidArgument
	NotFound
	AlreadyExists
	FailedPrecondition
	PermissionDenied
	Aborted
	Unavailable
	DeadlineExceeded
	OutOfRange
	ResourceExhausted
	Unimplemented
)

var kindNames = [...]string{"Internal", "InvalidArgument", "NotFound", "AlreadyExists",
	"FailedPrecondition", "PermissionDenied", "Aborted", "Unavailable",
	"DeadlineExceeded", "OutOfRange", "ResourceExhausted", "Unimplemented"}

// String returns the kind's name, e.g. "InvalidArgument".
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Final reports whether a container orchestrator takes an answer of this
// kind as the end of the call rather than a reason to retry it
// (csi-provisioner retries Aborted, Unavailable, DeadlineExceeded and
// ResourceExhausted as in progress; anything else ends provisioning, and
// it deletes no volume it was not given).
func (k Kind) Final() bool {
	switch k {
	case Aborted, Unavailable, DeadlineExceeded, ResourceExhausted:
		return false
	}
	return true
}

// Error is an error with a Kind. Its message is meant for the operator.
type Error struct {
	Kind Kind
	Msg  string
	Err  error // optional cause
}

// Error returns the message, followed by the cause when there is one.
func (e *Error) Error() string {
	if e.Err != nil {
		return e.Msg + ": " + e.Err.Error()
	}
	return e.Msg
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// New returns an error of kind k with a formatted message.
func New(k Kind, format string, args ...any) error {
	return &Error{Kind: k, Msg: fmt.Sprintf(format, args...)}
}

// Wrap returns an error of kind k whose message is the formatted text
// followed by err. It returns nil when err is nil.
func Wrap(k Kind, err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	return &Error{Kind: k, Msg: fmt.Sprintf(format, args...), Err: err}
}

// KindOf returns the kind of err: the outermost *Error's kind, else a kind
// derived from well-known causes (context deadline, permission, ESTALE, ...),
// else Internal.
func KindOf(err error) Kind {
	var fe *Error
	if errors.As(err, &fe) && fe.Kind != Internal {
		return fe.Kind
	}
	switch {
	case err == nil:
		return Internal
	case errors.Is(err, context.DeadlineExceeded):
		return DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return Aborted
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EROFS):
		return PermissionDenied
	case Unreachable(err):
		return Unavailable
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return ResourceExhausted
	}
	return Internal
}

// Is reports whether err has kind k.
func Is(err error, k Kind) bool { return err != nil && KindOf(err) == k }

// unreachable are the errnos with which the kernel reports a mount that is
// stale or whose server cannot be reached: the one list nfsdir uses.
var unreachable = []syscall.Errno{syscall.ESTALE, syscall.ENOTCONN, syscall.EIO, syscall.EHOSTDOWN, syscall.ENODEV}

// Unreachable reports whether err (at any depth of wrapping) says a mount
// is stale or its server unreachable: unmounting and mounting again is the
// remedy, and the caller's answer is Unavailable.
func Unreachable(err error) bool {
	for _, e := range unreachable {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
