// Package serveragent is nfsdir's server agent (`nfsdir agent`): a small
// gRPC service, over TCP with mutual TLS, that runs on the NFS server host and makes the
// server enforce each volume's size with project quotas (pkg/quota), and
// copies volumes' trees on the server itself for snapshots, restores and
// clones (no file crosses the network, and a file costs no NFS call). The
// controller asks it to set, change and clear a volume's limits, to
// report its usage, and to copy; it never gives the controller a shell or
// any path of its choosing: the agent acts only below the export roots it
// is configured with, only on directories nfsdir recorded on the share (it
// reads the records on its side), only for a caller that shows the
// volume's creation token, and copies only into an empty directory of a
// volume being filled or of a snapshot being made. It also makes and
// deletes the volumes of StorageClasses that name it as their copy agent,
// running nfsdir's own provisioning code on the server's file system as
// the user who owns nfsdir's files there: the controller could do the
// same through its mount, at a dozen NFS calls a volume.
//
// The messages are JSON (a gRPC codec of their own, "json"): no generated
// code, and an audit trail an operator can read.
package serveragent

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/status"

	"github.com/nfsdir/nfsdir/pkg/provision"
	"github.com/nfsdir/nfsdir/pkg/treecopy"
)

// Volume names one volume directory: the share as clients mount it, the
// directory below it, and the creation token from its volume ID.
type Volume struct {
	Share  string `json:"share"`
	SubDir string `json:"subDir"`
	Token  string `json:"token"`
}

// SetRequest sets a volume's hard limits (0: none).
type SetRequest struct {
	Volume
	Bytes  uint64 `json:"bytes"`
	Inodes uint64 `json:"inodes"`
}

// Usage is what a volume's project uses, and its limits.
type Usage struct {
	Project     uint32 `json:"project"`
	Bytes       uint64 `json:"bytes"`
	Inodes      uint64 `json:"inodes"`
	LimitBytes  uint64 `json:"limitBytes"`
	LimitInodes uint64 `json:"limitInodes"`
}

// Empty is a message without fields.
type Empty struct{}

// ServiceName is the gRPC service the agent serves: its API, version 1.
// Methods and fields are only ever added to a version; a change that
// would break a caller of it is a new version, served beside this one.
const ServiceName = "nfsdir.agent.v1.Agent"

// formerServiceName is the same service under the name releases before
// the agent's rename served and called. The agent serves it too, and a
// controller falls back to it, so that the controller and the agent may
// be upgraded in either order.
const formerServiceName = "nfsdir.quota.v1.Agent"

// Service is what the agent does.
type Service interface {
	// Set gives the volume's directory a project of its own (once) and
	// sets the project's limits; the same call again changes nothing.
	Set(context.Context, *SetRequest) (*Usage, error)
	// Clear removes the volume's limits and releases its project: the
	// directory leaves it; files below keep counting until they are gone.
	Clear(context.Context, *Volume) (*Empty, error)
	// Get reports the volume's usage and limits.
	Get(context.Context, *Volume) (*Usage, error)
	// Copy copies a tree of nfsdir's on the server into an empty
	// directory of nfsdir's, and answers when it is complete.
	Copy(context.Context, *provision.RemoteCopy) (*treecopy.Result, error)
	// CopyProgress tells how far a copy being made has come.
	CopyProgress(context.Context, *provision.RemoteCopy) (*CopyProgress, error)
	// MakeVolume makes a volume on the server as the controller's
	// provision.Area.Create would through its mount, and answers its
	// record.
	MakeVolume(context.Context, *provision.RemoteMake) (*provision.Record, error)
	// RemoveVolume deletes a volume on the server as
	// provision.Area.Delete would, and answers whether its trash holds
	// something for the controller's purge.
	RemoveVolume(context.Context, *provision.RemoteRemove) (*provision.RemoteRemoved, error)
	// Probe answers when the agent can serve.
	Probe(context.Context, *Empty) (*Empty, error)
}

// CopyProgress is how far a copy has come; Running false: none is being
// made into that directory.
type CopyProgress struct {
	Running bool  `json:"running"`
	Entries int64 `json:"entries"`
	Bytes   int64 `json:"bytes"`
}

type jsonCodec struct{}

func (jsonCodec) Marshal(v any) ([]byte, error)      { return json.Marshal(v) }
func (jsonCodec) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }
func (jsonCodec) Name() string                       { return "json" }

func init() { encoding.RegisterCodec(jsonCodec{}) }

// handler decodes a request of method of service and runs call with it,
// through the server's interceptor (which authorizes the caller) when it
// has one.
func handler[Req any, Resp any](service, method string, call func(Service, context.Context, *Req) (*Resp, error)) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, intercept grpc.UnaryServerInterceptor) (any, error) {
		req := new(Req)
		if err := dec(req); err != nil {
			return nil, err
		}
		run := func(ctx context.Context, req any) (any, error) { return call(srv.(Service), ctx, req.(*Req)) }
		if intercept == nil {
			return run(ctx, req)
		}
		return intercept(ctx, req, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/" + service + "/" + method}, run)
	}
}

// serviceDesc describes the agent's service under the name service.
func serviceDesc(service string) *grpc.ServiceDesc {
	return &grpc.ServiceDesc{
		ServiceName: service,
		HandlerType: (*Service)(nil),
		Methods: []grpc.MethodDesc{
			{MethodName: "Set", Handler: handler(service, "Set", Service.Set)},
			{MethodName: "Clear", Handler: handler(service, "Clear", Service.Clear)},
			{MethodName: "Get", Handler: handler(service, "Get", Service.Get)},
			{MethodName: "Copy", Handler: handler(service, "Copy", Service.Copy)},
			{MethodName: "CopyProgress", Handler: handler(service, "CopyProgress", Service.CopyProgress)},
			{MethodName: "MakeVolume", Handler: handler(service, "MakeVolume", Service.MakeVolume)},
			{MethodName: "RemoveVolume", Handler: handler(service, "RemoveVolume", Service.RemoveVolume)},
			{MethodName: "Probe", Handler: handler(service, "Probe", Service.Probe)},
		},
	}
}

// Register serves s on g, under the service's name and its former one.
func Register(g *grpc.Server, s Service) {
	g.RegisterService(serviceDesc(ServiceName), s)
	g.RegisterService(serviceDesc(formerServiceName), s)
}

// Client calls an agent.
type Client struct {
	conn *grpc.ClientConn
	// former is set once the agent answered that it does not know
	// ServiceName: an agent of an earlier release, called by the
	// service's former name from then on.
	former atomic.Bool
}

// NewClient returns a Client over conn.
func NewClient(conn *grpc.ClientConn) *Client { return &Client{conn: conn} }

// call makes one call of method, under the service's name or, for an agent
// that does not know it, its former name.
func (c *Client) call(ctx context.Context, method string, req, out any) error {
	if !c.former.Load() {
		err := c.conn.Invoke(ctx, "/"+ServiceName+"/"+method, req, out, grpc.CallContentSubtype("json"))
		if status.Code(err) != codes.Unimplemented || !strings.Contains(status.Convert(err).Message(), "unknown service") {
			return err
		}
		c.former.Store(true)
	}
	return c.conn.Invoke(ctx, "/"+formerServiceName+"/"+method, req, out, grpc.CallContentSubtype("json"))
}

// reconnectWait bounds how long a call waits for a failed connection to
// come back before it is tried again.
const reconnectWait = 2 * time.Second

// invoke calls method. A connection that failed before (an agent
// restarted) is not left to its back-off: the call tries to connect again
// at once, once.
func invoke[Resp any](ctx context.Context, c *Client, method string, req any) (*Resp, error) {
	out := new(Resp)
	err := c.call(ctx, method, req, out)
	if status.Code(err) == codes.Unavailable && c.conn.GetState() == connectivity.TransientFailure {
		c.conn.ResetConnectBackoff()
		wctx, cancel := context.WithTimeout(ctx, reconnectWait)
		for s := c.conn.GetState(); s != connectivity.Ready && c.conn.WaitForStateChange(wctx, s); s = c.conn.GetState() {
		}
		cancel()
		err = c.call(ctx, method, req, out)
	}
	return out, err
}

// Set calls the agent's Set.
func (c *Client) Set(ctx context.Context, req *SetRequest) (*Usage, error) {
	return invoke[Usage](ctx, c, "Set", req)
}

// Clear calls the agent's Clear.
func (c *Client) Clear(ctx context.Context, v *Volume) error {
	_, err := invoke[Empty](ctx, c, "Clear", v)
	return err
}

// Get calls the agent's Get.
func (c *Client) Get(ctx context.Context, v *Volume) (*Usage, error) {
	return invoke[Usage](ctx, c, "Get", v)
}

// Copy calls the agent's Copy.
func (c *Client) Copy(ctx context.Context, req *provision.RemoteCopy) (*treecopy.Result, error) {
	return invoke[treecopy.Result](ctx, c, "Copy", req)
}

// CopyProgress calls the agent's CopyProgress.
func (c *Client) CopyProgress(ctx context.Context, req *provision.RemoteCopy) (*CopyProgress, error) {
	return invoke[CopyProgress](ctx, c, "CopyProgress", req)
}

// MakeVolume calls the agent's MakeVolume.
func (c *Client) MakeVolume(ctx context.Context, req *provision.RemoteMake) (*provision.Record, error) {
	return invoke[provision.Record](ctx, c, "MakeVolume", req)
}

// RemoveVolume calls the agent's RemoveVolume.
func (c *Client) RemoveVolume(ctx context.Context, req *provision.RemoteRemove) (provision.RemoteRemoved, error) {
	r, err := invoke[provision.RemoteRemoved](ctx, c, "RemoveVolume", req)
	if r == nil {
		return provision.RemoteRemoved{}, err
	}
	return *r, err
}

// Probe calls the agent's Probe.
func (c *Client) Probe(ctx context.Context) error {
	_, err := invoke[Empty](ctx, c, "Probe", &Empty{})
	return err
}
