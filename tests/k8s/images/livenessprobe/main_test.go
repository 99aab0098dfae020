package main

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

type fakeIdentity struct {
	csi.IdentityClient
	ready bool
	err   error
}

func (f fakeIdentity) Probe(context.Context, *csi.ProbeRequest, ...grpc.CallOption) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(f.ready)}, f.err
}

func TestHealthz(t *testing.T) {
	for _, tc := range []struct {
		id   fakeIdentity
		code int
	}{{fakeIdentity{ready: true}, 200}, {fakeIdentity{ready: false}, 500}, {fakeIdentity{err: errors.New("down")}, 500}} {
		rec := httptest.NewRecorder()
		handler(tc.id, time.Second).ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
		if rec.Code != tc.code {
			t.Errorf("%+v: %d, want %d", tc.id, rec.Code, tc.code)
		}
	}
}
