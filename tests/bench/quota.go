package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/nfsdir/nfsdir/pkg/serveragent"
	"github.com/nfsdir/nfsdir/tests/bench/report"
	"github.com/nfsdir/nfsdir/tests/lab"
)

// quotaAgentAddr is where the bench's quota agent listens.
const quotaAgentAddr = "127.0.0.1:29701"

// startQuotaAgent makes certificates in dir, serves a quota agent for the
// lab's prjquota export (and the tmpfs export, for copies) in this process (over TCP with mutual TLS on the
// loopback, as from another host) and returns the PKI whose client
// certificate the driver uses.
func startQuotaAgent(ctx context.Context, dir string) (lab.PKI, error) {
	pki, err := lab.MakePKI(dir)
	if err != nil {
		return pki, err
	}
	root := os.Getenv("NFSDIR_LAB_QUOTA_EXPORT")
	export := os.Getenv("NFSDIR_LAB_EXPORT") // for copies only: tmpfs has no project quotas
	agent, err := serveragent.New(serveragent.Config{Exports: []serveragent.Export{{Share: root, Dir: root}},
		CopyExports: []serveragent.Export{{Share: export, Dir: export}}, FirstProject: 7000, LastProject: 7999})
	if err != nil {
		return pki, err
	}
	tlsCfg, err := serveragent.ServerTLS(serveragent.Files{Cert: pki.Server.Cert, Key: pki.Server.Key, CA: pki.CA}, serveragent.Identities{Controllers: []string{serveragent.DefaultControllerIdentity}})
	if err != nil {
		return pki, err
	}
	l, err := net.Listen("tcp", quotaAgentAddr)
	if err != nil {
		return pki, err
	}
	go serveragent.Serve(ctx, l, agent, tlsCfg, serveragent.Identities{Controllers: []string{serveragent.DefaultControllerIdentity}})
	return pki, nil
}

// quotaRows measures CreateVolume and DeleteVolume on the prjquota export
// with the quota agent (the limit set before CreateVolume answers, cleared
// before DeleteVolume moves the directory) against the same calls without.
func (b *bench) quotaRows(server string, n int) {
	root := os.Getenv("NFSDIR_LAB_QUOTA_EXPORT")
	round := func(label string, params map[string]string) (creates, deletes []time.Duration) {
		vols := make([]*csi.Volume, 0, n)
		for i := range n {
			t0 := time.Now()
			r, err := b.ctl.CreateVolume(b.ctx, &csi.CreateVolumeRequest{Name: fmt.Sprintf("pvc-%s-%d", label, i), Parameters: params,
				VolumeCapabilities: []*csi.VolumeCapability{b.vc}, CapacityRange: &csi.CapacityRange{RequiredBytes: 64 << 20}})
			if err != nil {
				die(err)
			}
			creates = append(creates, time.Since(t0))
			vols = append(vols, r.GetVolume())
		}
		for _, v := range vols {
			t0 := time.Now()
			if _, err := b.ctl.DeleteVolume(b.ctx, &csi.DeleteVolumeRequest{VolumeId: v.GetVolumeId()}); err != nil {
				die(err)
			}
			deletes = append(deletes, time.Since(t0))
		}
		return creates, deletes
	}
	plain := map[string]string{"server": server, "share": root}
	withAgent := map[string]string{"server": server, "share": root, "quotaAgent": quotaAgentAddr}
	round("quota-warm", withAgent) // the agent's connection and TLS session
	pc, pd := round("noquota", plain)
	qc, qd := round("quota", withAgent)
	without := func(d time.Duration) report.Base { return vsOther("the same class without quotaAgent", "", d) }
	add(mQuota, fmt.Sprintf("CreateVolume with XFS project quotas, median of %d", n), median(qc), "", without(median(pc)))
	add(mQuota, fmt.Sprintf("empty DeleteVolume with XFS project quotas, median of %d", n), median(qd), "", without(median(pd)))
}
