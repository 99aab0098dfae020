package csiserver

import (
	"context"

	"github.com/nfsdir/nfsdir/pkg/params"
	"github.com/nfsdir/nfsdir/pkg/provision"
	"github.com/nfsdir/nfsdir/pkg/volumeid"
)

// modify applies change to the record of the volume id (raw). A new mount
// address is checked through itself: the record is read, and the volume's
// sealed directory seen, at that address, so that nodes are sent there
// only when it serves the volume's own data.
func (s *Controller) modify(ctx context.Context, raw string, id volumeid.ID, change provision.Change) (*provision.Record, error) {
	at := id
	if change.MountServer != nil && *change.MountServer != "" {
		at.Export.Server = *change.MountServer
	}
	return s.updateRecord(ctx, raw, at, func(a *provision.Area) (*provision.Record, error) { return a.Modify(id, change) })
}

// mountServerChange is the change of mount address mut asks for: nil for
// none, "" for the volume's own export's.
func mountServerChange(mut params.Mutable, id volumeid.ID) *string {
	if !mut.HasMountServer {
		return nil
	}
	server := mut.MountServer
	if server == id.Export.Server {
		server = ""
	}
	return &server
}
