package serveragent

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/nfsdir/nfsdir/pkg/provision"
	"github.com/nfsdir/nfsdir/pkg/treecopy"
)

var update = flag.Bool("update", false, "record the agent API's schema in testdata")

// messages are each method's request and answer.
var messages = map[string][2]any{
	"Set":          {SetRequest{}, Usage{}},
	"Clear":        {Volume{}, Empty{}},
	"Get":          {Volume{}, Usage{}},
	"Copy":         {provision.RemoteCopy{}, treecopy.Result{}},
	"CopyProgress": {provision.RemoteCopy{}, CopyProgress{}},
	"MakeVolume":   {provision.RemoteMake{}, provision.Record{}},
	"RemoveVolume": {provision.RemoteRemove{}, provision.RemoteRemoved{}},
	"Probe":        {Empty{}, Empty{}},
}

// TestTheAPIsVersionOneOnlyGrows: the JSON schema of every method of
// nfsdir.agent.v1 (its messages' field names and types) keeps everything
// testdata/agent-v1.schema records, so that a controller and an agent of
// different releases understand each other. A field added is recorded
// with -update; a field removed, renamed or retyped fails: that is a new
// version of the API, served beside this one.
func TestTheAPIsVersionOneOnlyGrows(t *testing.T) {
	var methods []string
	for _, m := range serviceDesc(ServiceName).Methods {
		methods = append(methods, m.MethodName)
	}
	var listed []string
	for m := range messages {
		listed = append(listed, m)
	}
	sort.Strings(methods)
	sort.Strings(listed)
	if !slices.Equal(methods, listed) {
		t.Fatalf("the service has methods %v, the test knows %v", methods, listed)
	}
	var lines []string
	for _, m := range methods {
		for i, dir := range []string{"request", "answer"} {
			lines = append(lines, schema(m+" "+dir, reflect.TypeOf(messages[m][i]), 0)...)
		}
	}
	golden := filepath.Join("testdata", "agent-v1.schema")
	if *update {
		os.MkdirAll("testdata", 0o755)
		if err := os.WriteFile(golden, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	recorded := strings.Split(strings.TrimSpace(string(b)), "\n")
	for _, l := range recorded {
		if !slices.Contains(lines, l) {
			t.Errorf("%s is gone from the API: a caller of version 1 relies on it; serve a new version instead", l)
		}
	}
	for _, l := range lines {
		if !slices.Contains(recorded, l) {
			t.Errorf("%s is new: record it with go test ./pkg/serveragent -run TestTheAPIs -update", l)
		}
	}
}

// schema lists the JSON fields of t, as "prefix.field type", through
// nested structs (embedded ones flattened, as encoding/json does).
func schema(prefix string, t reflect.Type, depth int) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || depth > 4 {
		return []string{prefix + " " + typeName(t)}
	}
	var out []string
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" {
			out = append(out, schema(prefix, f.Type, depth)...)
			continue
		}
		if name == "" {
			name = f.Name
		}
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct && ft.PkgPath() != "time" {
			out = append(out, schema(prefix+"."+name, ft, depth+1)...)
			continue
		}
		out = append(out, prefix+"."+name+" "+typeName(ft))
	}
	if len(out) == 0 {
		out = append(out, prefix+" {}")
	}
	return out
}

// typeName is the JSON-relevant name of t: its kind, with element types.
func typeName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Pointer:
		return typeName(t.Elem())
	case reflect.Slice, reflect.Array:
		return "[]" + typeName(t.Elem())
	case reflect.Map:
		return "map[" + typeName(t.Key()) + "]" + typeName(t.Elem())
	case reflect.Struct:
		return t.String()
	}
	return t.Kind().String()
}

// probeOnly is an agent whose Probe answers; the rest is never called.
type probeOnly struct {
	Service
	probes atomic.Int32
}

func (p *probeOnly) Probe(context.Context, *Empty) (*Empty, error) {
	p.probes.Add(1)
	return &Empty{}, nil
}

// serve runs a gRPC server on loopback with the agent's service under the
// given names, and returns a connection to it.
func serve(t *testing.T, s Service, names ...string) *grpc.ClientConn {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	for _, n := range names {
		g.RegisterService(serviceDesc(n), s)
	}
	go g.Serve(l)
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestTheAgentAnswersUnderBothNames: a controller of an earlier release
// calls the service by its former name, and the agent answers it.
func TestTheAgentAnswersUnderBothNames(t *testing.T) {
	agent := &probeOnly{}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	g := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		seen = append(seen, info.FullMethod)
		return h(ctx, req)
	}))
	Register(g, agent)
	go g.Serve(l)
	defer g.Stop()
	conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, name := range []string{ServiceName, formerServiceName} {
		if err := conn.Invoke(t.Context(), fmt.Sprintf("/%s/Probe", name), &Empty{}, &Empty{}, grpc.CallContentSubtype("json")); err != nil {
			t.Errorf("Probe as %s: %v", name, err)
		}
	}
	want := []string{"/nfsdir.agent.v1.Agent/Probe", "/nfsdir.quota.v1.Agent/Probe"}
	if !slices.Equal(seen, want) || agent.probes.Load() != 2 {
		t.Errorf("the interceptor saw %v (want %v), %d probes answered", seen, want, agent.probes.Load())
	}
}

// TestTheClientCallsAnAgentOfTheFormerName: an agent of an earlier
// release knows only the former name; the controller's client finds that
// out once and calls it so from then on.
func TestTheClientCallsAnAgentOfTheFormerName(t *testing.T) {
	for _, c := range []struct {
		names  []string
		former bool
	}{{[]string{formerServiceName}, true}, {[]string{ServiceName}, false}} {
		agent := &probeOnly{}
		client := NewClient(serve(t, agent, c.names...))
		for range 3 {
			if err := client.Probe(t.Context()); err != nil {
				t.Fatalf("agent serving %v: %v", c.names, err)
			}
		}
		if agent.probes.Load() != 3 || client.former.Load() != c.former {
			t.Errorf("agent serving %v: %d probes answered, former name used: %v", c.names, agent.probes.Load(), client.former.Load())
		}
	}
}
