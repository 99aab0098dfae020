package fault

import (
	"context"
	"fmt"
	"io/fs"
	"syscall"
	"testing"
)

func TestKindOf(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want Kind
	}{
		{"new", New(NotFound, "volume %q not found", "v"), NotFound},
		{"wrapped by fmt", fmt.Errorf("outer: %w", New(AlreadyExists, "x")), AlreadyExists},
		{"wrap keeps kind", Wrap(FailedPrecondition, syscall.ENOENT, "x"), FailedPrecondition},
		{"deadline", fmt.Errorf("mount: %w", context.DeadlineExceeded), DeadlineExceeded},
		{"internal wrapper around deadline", Wrap(Internal, context.DeadlineExceeded, "x"), DeadlineExceeded},
		{"permission", &fs.PathError{Op: "mkdir", Path: "/x", Err: syscall.EACCES}, PermissionDenied},
		{"stale", &fs.PathError{Op: "stat", Path: "/x", Err: syscall.ESTALE}, Unavailable},
		{"no space", syscall.ENOSPC, ResourceExhausted},
		{"plain", fmt.Errorf("boom"), Internal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := KindOf(tt.err); got != tt.want {
				t.Errorf("KindOf(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

func TestErrorMessage(t *testing.T) {
	err := Wrap(Unavailable, syscall.ESTALE, "share %s", "s:/x")
	if got, want := err.Error(), "share s:/x: stale file handle"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if Wrap(Internal, nil, "x") != nil {
		t.Error("Wrap(nil) must be nil")
	}
	if InvalidArgument.String() != "InvalidArgument" {
		t.Error(InvalidArgument.String())
	}
}
