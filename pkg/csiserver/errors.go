package csiserver

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nfsdir/nfsdir/pkg/grpcstatus"
)

// toStatus maps a domain error to a gRPC status error; nil stays nil.
func toStatus(err error) error { return grpcstatus.Of(err) }

// invalid returns an InvalidArgument status.
func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

// busy returns the Aborted status for an operation already in progress.
func busy(what string) error {
	return status.Errorf(codes.Aborted, "an operation on %s is already in progress; retry later", what)
}
