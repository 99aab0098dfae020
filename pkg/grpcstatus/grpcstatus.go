// Package grpcstatus is the one place where nfsdir's failure kinds
// (pkg/fault) and gRPC status codes meet, both ways: the CSI services and
// the quota agent answer with the code of an error's kind, and the
// controller takes an agent's answer back as a kind.
package grpcstatus

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nfsdir/nfsdir/pkg/fault"
)

var codeOf = map[fault.Kind]codes.Code{
	fault.Internal:           codes.Internal,
	fault.InvalidArgument:    codes.InvalidArgument,
	fault.NotFound:           codes.NotFound,
	fault.AlreadyExists:      codes.AlreadyExists,
	fault.FailedPrecondition: codes.FailedPrecondition,
	fault.PermissionDenied:   codes.PermissionDenied,
	fault.Aborted:            codes.Aborted,
	fault.Unavailable:        codes.Unavailable,
	fault.DeadlineExceeded:   codes.DeadlineExceeded,
	fault.OutOfRange:         codes.OutOfRange,
	fault.ResourceExhausted:  codes.ResourceExhausted,
	fault.Unimplemented:      codes.Unimplemented,
}

// Of maps a domain error to a gRPC status error; nil stays nil, and a
// status error stays as it is.
func Of(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(codeOf[fault.KindOf(err)], err.Error())
}

// Kind returns the kind of a gRPC answer's error: its code's kind; a
// transport failure (Canceled, Unknown) is Unavailable.
func Kind(err error) fault.Kind {
	st, ok := status.FromError(err)
	if !ok {
		return fault.KindOf(err)
	}
	for k, c := range codeOf {
		if c == st.Code() {
			return k
		}
	}
	return fault.Unavailable
}
