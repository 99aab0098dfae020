package csiserver

import (
	"sync"

	"k8s.io/klog/v2"

	"github.com/nfsdir/nfsdir/pkg/export"
	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/params"
	"github.com/nfsdir/nfsdir/pkg/volumeid"
)

// locate fills in where the named export of id is now, from the driver's
// exports (--export); an ID of a server and share keeps them.
// FailedPrecondition when the configuration does not hold the name: the
// volume cannot be reached, and nothing may take it as gone.
func locate(names export.Names, id *volumeid.ID) error {
	if id.Name == "" {
		return nil
	}
	e, ok := names.Lookup(id.Name)
	if !ok {
		what := "volume"
		if id.Snapshot {
			what = "snapshot"
		}
		return fault.New(fault.FailedPrecondition, "%s %s is on export %q, which the driver's configuration does not name (it names %s): add it to the chart value exports (flag --export)", what, id, id.Name, names.List())
	}
	id.Export = e
	return nil
}

// locateVolume fills in where the named export of a volume's attributes
// is now. A node whose configuration does not hold the name mounts the
// address the volume was made on, when the attributes have it.
func locateVolume(names export.Names, v *params.Volume) error {
	if v.ExportName == "" {
		return nil
	}
	if e, ok := names.Lookup(v.ExportName); ok {
		v.Export = e
		return nil
	}
	if v.Export == (export.Export{}) {
		return fault.New(fault.InvalidArgument, "the volume is on export %q, which this node's configuration does not name (it names %s): add it to the chart value exports (flag --export)", v.ExportName, names.List())
	}
	if unnamed.first(v.ExportName) {
		klog.Warningf("export %q is not in this node's configuration (it names %s): mounting its volumes where they were when they were made (%s for this one); said once per name", v.ExportName, names.List(), v.Export)
	}
	return nil
}

// unnamed remembers the export names a node was asked for and lacks, so
// that it says so once per name rather than at every publish.
var unnamed = onceEach{max: 256}

// onceEach answers true the first time it is given each string, up to
// max strings; after that, always true.
type onceEach struct {
	mu   sync.Mutex
	seen map[string]bool
	max  int
}

func (o *onceEach) first(s string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.seen[s] {
		return false
	}
	if o.seen == nil {
		o.seen = map[string]bool{}
	}
	if len(o.seen) < o.max {
		o.seen[s] = true
	}
	return true
}
