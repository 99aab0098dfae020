package csiserver

import (
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"k8s.io/klog/v2"
)

// Identity serves the CSI Identity service.
type Identity struct {
	csi.UnimplementedIdentityServer
	name, version string
	controller    bool
	// ready returns nil when the driver can serve requests.
	ready func() error
}

// GetPluginInfo returns the driver name and version.
func (s *Identity) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: s.name, VendorVersion: s.version}, nil
}

// GetPluginCapabilities advertises the controller service and online
// expansion when the controller runs.
func (s *Identity) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	resp := &csi.GetPluginCapabilitiesResponse{}
	if s.controller {
		resp.Capabilities = append(resp.Capabilities, &csi.PluginCapability{Type: &csi.PluginCapability_Service_{
			Service: &csi.PluginCapability_Service{Type: csi.PluginCapability_Service_CONTROLLER_SERVICE}}})
		// Expansion is recorded by the controller while pods use the
		// volume; nodes have nothing to resize.
		resp.Capabilities = append(resp.Capabilities, &csi.PluginCapability{Type: &csi.PluginCapability_VolumeExpansion_{
			VolumeExpansion: &csi.PluginCapability_VolumeExpansion{Type: csi.PluginCapability_VolumeExpansion_ONLINE}}})
	}
	return resp, nil
}

// Probe reports readiness: false until the server is serving and, for the
// controller, its state directory is writable.
func (s *Identity) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	err := s.ready()
	if err != nil {
		klog.V(2).Infof("probe: not ready: %v", err)
	}
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(err == nil)}, nil
}
