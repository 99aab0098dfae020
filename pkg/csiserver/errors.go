package csiserver

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

// toStatus maps a domain error to a gRPC status error; nil stays nil.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(codeOf[fault.KindOf(err)], err.Error())
}

// invalid returns an InvalidArgument status.
func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

// busy returns the Aborted status for an operation already in progress.
func busy(what string) error {
	return status.Errorf(codes.Aborted, "an operation on %s is already in progress; retry later", what)
}
