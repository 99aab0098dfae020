package csiserver

import (
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
	klog.Warningf("export %q is not in this node's configuration (it names %s): mounting %s, where it was when the volume was made", v.ExportName, names.List(), v.Export)
	return nil
}
