package e2e

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nfsdir/nfsdir/pkg/config"
	"github.com/nfsdir/nfsdir/pkg/quota"
	"github.com/nfsdir/nfsdir/pkg/serveragent"
	"github.com/nfsdir/nfsdir/pkg/volumeid"
	"github.com/nfsdir/nfsdir/tests/lab"
)

// TestProjectQuotaOnRealXFS: the server side of hard quotas (what the
// quota agent does), on the lab's XFS export mounted with prjquota. A
// directory gets a project with the inherit flag and a 16 MiB limit; a
// writer (uid 1000) through an NFSv4.2 mount of the export stops near
// 16 MiB with ENOSPC (XFS's answer for a full project), and so does root; statfs on an NFS mount of the
// directory shows the limit, as `df` in a pod would; raising the limit
// lets the writer go on; the usage reported is the directory's; renaming
// the directory out of its project's tree (what nfsdir's trash does)
// works, and renaming a file into another project's directory is EXDEV.
func TestProjectQuotaOnRealXFS(t *testing.T) {
	lab.Require(t)
	projectQuotaOn(t, lab.QuotaExport(), syscall.ENOSPC, false)
}

// TestProjectQuotaOnRealExt4: the same on ext4 made with -O
// quota,project, where a full project is EDQUOT, and where root's writes
// (CAP_SYS_RESOURCE, which the server's NFS threads keep for root on a
// no_root_squash export) pass over the limit.
func TestProjectQuotaOnRealExt4(t *testing.T) {
	lab.Require(t)
	projectQuotaOn(t, lab.Ext4QuotaExport(), syscall.EDQUOT, true)
}

// projectQuotaOn runs the project quota checks on the export root, whose
// file system answers a write past a full project with full, and lets
// root's writes past the limit if rootPasses.
func projectQuotaOn(t *testing.T, root string, full syscall.Errno, rootPasses bool) {
	fs, err := quota.Open(root)
	if err != nil {
		t.Fatalf("the lab's quota export: %v", err)
	}
	defer fs.Close()
	vol := filepath.Join(root, "pvc-quota")
	other := filepath.Join(root, "pvc-other")
	for _, d := range []string{vol, other} {
		if err := os.Mkdir(d, 0o777); err != nil {
			t.Fatal(err)
		}
		os.Chown(d, writer, writer)
	}
	defer os.RemoveAll(vol)
	defer os.RemoveAll(other)
	const id, otherID = 4101, 4102
	setProject(t, vol, id)
	setProject(t, other, otherID)
	if err := fs.SetLimits(id, quota.Limits{Bytes: 16 << 20, Inodes: 1000}); err != nil {
		t.Fatal(err)
	}
	defer fs.SetLimits(id, quota.Limits{})

	mnt := nfsMount(t, lab.Server()+":"+root, "vers=4.2")
	written, werr := fillAs(writer, filepath.Join(mnt, "pvc-quota", "big"), 32<<20)
	t.Logf("wrote %d bytes before %v", written, werr)
	if !errors.Is(werr, full) {
		t.Fatalf("writing past the project limit: %v after %d bytes, want %v", werr, written, full)
	}
	if written > 16<<20 || written < 12<<20 {
		t.Errorf("the writer stopped after %d bytes; the limit is %d", written, 16<<20)
	}
	u, err := fs.Get(id)
	if err != nil || u.Bytes > 16<<20 || u.Bytes < 12<<20 || u.Inodes != 2 || u.Limits.Bytes != 16<<20 {
		t.Errorf("usage %+v, %v; want about 16 MiB in 2 inodes (the directory and the file)", u, err)
	}
	// Root on a no_root_squash export: XFS holds it to the limit too;
	// ext4 lets it past (the pitfall docs/capacity-and-quotas.md names).
	n, rerr := fill(filepath.Join(mnt, "pvc-quota", "root"), 1<<20)
	if rootPasses && rerr != nil {
		t.Errorf("root writing past the full project: %v after %d bytes; this file system was expected to let root past", rerr, n)
	}
	if !rootPasses && !errors.Is(rerr, full) {
		t.Errorf("root writing past the full project: %v after %d bytes; want %v", rerr, n, full)
	}
	os.Remove(filepath.Join(vol, "root"))
	// statfs inside the directory, over NFS: the project's figures.
	sub := nfsMount(t, lab.Server()+":"+vol, "vers=4.2")
	var st unix.Statfs_t
	if err := unix.Statfs(sub, &st); err != nil {
		t.Fatal(err)
	}
	if total := st.Blocks * uint64(st.Bsize); total != 16<<20 {
		t.Errorf("statfs of the directory over NFS: %d bytes total, want the limit %d", total, 16<<20)
	}
	if files := st.Files; files != 1000 {
		t.Errorf("statfs of the directory over NFS: %d inodes, want the limit 1000", files)
	}
	// Expansion: a higher limit lets the writer go on.
	if err := fs.SetLimits(id, quota.Limits{Bytes: 48 << 20, Inodes: 1000}); err != nil {
		t.Fatal(err)
	}
	if n, err := fill(filepath.Join(mnt, "pvc-quota", "more"), 8<<20); err != nil {
		t.Errorf("after raising the limit: %v after %d bytes", err, n)
	}
	// The pitfalls: across projects, a rename into another project's
	// tree is EXDEV; out of every project (the trash), it works.
	err = os.Rename(filepath.Join(vol, "more"), filepath.Join(other, "more"))
	if !errors.Is(err, syscall.EXDEV) {
		t.Errorf("rename into another project's directory: %v, want EXDEV", err)
	}
	trash := filepath.Join(root, "trash")
	os.Mkdir(trash, 0o700)
	defer os.RemoveAll(trash)
	if err := os.Rename(vol, filepath.Join(trash, "pvc-quota")); err != nil {
		t.Errorf("rename of the project's directory into a directory of no project: %v", err)
	}
	os.Rename(filepath.Join(trash, "pvc-quota"), vol)
	f, err := os.Open(vol)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if got, inherit, err := quota.Project(f); err != nil || got != id || !inherit {
		t.Errorf("project of the directory: %d inherit %v, %v", got, inherit, err)
	}
}

func setProject(t *testing.T, dir string, id uint32) {
	t.Helper()
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := quota.SetProject(f, id); err != nil {
		t.Fatal(err)
	}
}

// nfsMount mounts source with options on a new directory and unmounts it
// at the end of the test.
func nfsMount(t *testing.T, source, options string) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "nfs", "-o", options, source, dir).CombinedOutput(); err != nil {
		t.Fatalf("mount %s: %v: %s", source, err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() { exec.Command("umount", "-f", dir).Run() })
	return dir
}

// writer is the unprivileged user tests write as, as a pod would: the
// server's NFS threads keep CAP_SYS_RESOURCE for root's requests on a
// no_root_squash export, and on ext4 (the VFS quota code) that capability
// passes over hard limits.
const writer = 1000

// fillAs is fill with uid as the NFS credential (the file system uid of
// this thread, which the NFS client sends); the path up to the file's
// directory is looked up as root (a test's directories are root's).
func fillAs(uid int, path string, n int) (int, error) {
	dir, err := os.Open(filepath.Dir(path))
	if err != nil {
		return 0, err
	}
	defer dir.Close()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	unix.Setfsgid(uid)
	defer unix.Setfsgid(0)
	unix.Setfsuid(uid)
	defer unix.Setfsuid(0)
	fd, err := unix.Openat(int(dir.Fd()), filepath.Base(path), unix.O_CREAT|unix.O_WRONLY|unix.O_EXCL|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return 0, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return fillFile(os.NewFile(uintptr(fd), path), n)
}

// fill writes up to n bytes to a new file, syncing every MiB so that the
// server's answer comes back with the write, and returns how many bytes
// were written before the first failure.
func fill(path string, n int) (int, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o644)
	if err != nil {
		return 0, err
	}
	return fillFile(f, n)
}

// fillFile writes up to n bytes to f, as fill does, and closes it.
func fillFile(f *os.File, n int) (int, error) {
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i)
	}
	written := 0
	for written < n {
		if _, err := f.Write(buf); err != nil {
			f.Close()
			return written, err
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return written, err
		}
		written += len(buf)
	}
	return written, f.Close()
}

// TestQuotaAgentOnRealXFS: `nfsdir agent` in the lab guest, talking
// mutual TLS on the loopback: it gives an nfsdir volume on the prjquota
// export a project and its limit; a writer through NFS stops there and df
// shows it; a higher limit lets the writer go on; a client certificate of
// another CA, a share outside its roots, a wrong token, a directory nfsdir
// did not record, a symlink and a recorded directory replaced by a symlink
// are refused; a restart keeps every quota; the volume's DeleteVolume
// (a rename into the trash, out of the project) works, and Clear after it
// is a no-op; every change is in the audit log.
func TestQuotaAgentOnRealXFS(t *testing.T) {
	ctx := context.Background()
	c := start(t, nil)
	root := lab.QuotaExport()
	pki := lab.NewPKI(t)
	audit := filepath.Join(t.TempDir(), "audit.log")
	agentArgs := []string{"agent", "--listen", "127.0.0.1:29700", "--export", root + "=" + root,
		"--tls-cert", pki.Server.Cert, "--tls-key", pki.Server.Key, "--client-ca", pki.CA,
		"--projects", "5000-5099", "--audit-log", audit}
	agent := startAgent(t, agentArgs)
	defer func() { agent.stop() }()
	cl := dialAgent(t, pki.Client, pki.CA)

	v := c.Create(t, "pvc-quota-agent", params("share", root), lab.RWX())
	id, err := volumeid.Parse(v.VolumeId)
	if err != nil {
		t.Fatal(err)
	}
	vol := serveragent.Volume{Share: root, SubDir: v.VolumeContext["subDir"], Token: id.Token}
	u, err := cl.Set(ctx, &serveragent.SetRequest{Volume: vol, Bytes: 16 << 20, Inodes: 1000})
	if err != nil || u.Project < 5000 || u.Project > 5099 || u.LimitBytes != 16<<20 {
		t.Fatalf("Set = %+v, %v", u, err)
	}
	if again, err := cl.Set(ctx, &serveragent.SetRequest{Volume: vol, Bytes: 16 << 20, Inodes: 1000}); err != nil || again.Project != u.Project {
		t.Errorf("the same Set again = %+v, %v; want project %d", again, err, u.Project)
	}
	mnt := nfsMount(t, lab.Server()+":"+root, "vers=4.2")
	written, werr := fill(filepath.Join(mnt, vol.SubDir, "big"), 32<<20)
	if !errors.Is(werr, syscall.ENOSPC) || written > 16<<20 || written < 12<<20 {
		t.Errorf("writer through NFS: %d bytes, then %v; want about 16 MiB, then ENOSPC", written, werr)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(nfsMount(t, lab.Server()+":"+filepath.Join(root, vol.SubDir), "vers=4.2"), &st); err != nil || st.Blocks*uint64(st.Bsize) != 16<<20 {
		t.Errorf("df of the volume over NFS: %d bytes, %v; want 16 MiB", st.Blocks*uint64(st.Bsize), err)
	}
	if _, err := cl.Set(ctx, &serveragent.SetRequest{Volume: vol, Bytes: 40 << 20, Inodes: 1000}); err != nil {
		t.Fatal(err)
	}
	if n, err := fill(filepath.Join(mnt, vol.SubDir, "more"), 8<<20); err != nil {
		t.Errorf("after the expansion: %v after %d bytes", err, n)
	}

	// Refusals.
	os.Mkdir(filepath.Join(root, "stray"), 0o755)
	os.Symlink(vol.SubDir, filepath.Join(root, "link"))
	replaced := c.Create(t, "pvc-quota-replaced", params("share", root), lab.RWX())
	rid, _ := volumeid.Parse(replaced.VolumeId)
	rsub := replaced.VolumeContext["subDir"]
	os.Rename(filepath.Join(root, rsub), filepath.Join(root, "moved-away"))
	os.Symlink(vol.SubDir, filepath.Join(root, rsub))
	for _, tt := range []struct {
		what string
		v    serveragent.Volume
		code codes.Code
	}{
		{"a share outside the roots", serveragent.Volume{Share: lab.Export(), SubDir: vol.SubDir, Token: vol.Token}, codes.PermissionDenied},
		{"a wrong token", serveragent.Volume{Share: root, SubDir: vol.SubDir, Token: "aaaaaaaa"}, codes.NotFound},
		{"a directory nfsdir did not record", serveragent.Volume{Share: root, SubDir: "stray", Token: vol.Token}, codes.NotFound},
		{"a symlink", serveragent.Volume{Share: root, SubDir: "link", Token: vol.Token}, codes.NotFound},
		{"a recorded directory replaced by a symlink", serveragent.Volume{Share: root, SubDir: rsub, Token: rid.Token}, codes.FailedPrecondition},
		{"a path out of the root", serveragent.Volume{Share: root, SubDir: "../etc", Token: vol.Token}, codes.InvalidArgument},
	} {
		if _, err := cl.Set(ctx, &serveragent.SetRequest{Volume: tt.v, Bytes: 1 << 20}); status.Code(err) != tt.code {
			t.Errorf("%s: %v, want %s", tt.what, err, tt.code)
		}
	}
	rogue := lab.NewPKI(t)
	if err := dialAgentErr(rogue.Client, pki.CA).Probe(ctx); err == nil {
		t.Error("a client certificate of another CA was accepted")
	}
	if st, err := os.Stat(filepath.Join(root, "moved-away")); err != nil || !st.IsDir() {
		t.Errorf("the moved-away directory: %v", err)
	}

	// A restart keeps every quota: they live in the file system.
	agent.stop()
	agent = startAgent(t, agentArgs)
	if got, err := cl.Get(ctx, &vol); err != nil || got.Project != u.Project || got.LimitBytes != 40<<20 || got.Bytes < 16<<20 {
		t.Errorf("after a restart: %+v, %v", got, err)
	}
	// Deleting the volume moves its directory out of the project.
	c.Delete(t, v)
	if err := cl.Clear(ctx, &vol); err != nil {
		t.Errorf("Clear after the volume is gone: %v", err)
	}
	b, _ := os.ReadFile(audit)
	if n := strings.Count(string(b), `"op":"set"`); n < 3+6 {
		t.Errorf("audit log holds %d set lines, want every change and refusal:\n%s", n, b)
	}
	os.Remove(filepath.Join(root, rsub))
	os.RemoveAll(filepath.Join(root, "moved-away"))
	os.Remove(filepath.Join(root, "link"))
	os.Remove(filepath.Join(root, "stray"))
}

// agentProc is a running quota agent.
type agentProc struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed once it exited and its output is read
}

// stop kills the agent and waits until it is gone (its port free).
func (p *agentProc) stop() {
	p.cmd.Process.Kill()
	<-p.exited
}

// startAgent runs `nfsdir agent` as root and waits until it listens.
func startAgent(t *testing.T, args []string) *agentProc {
	return startAgentAs(t, args, nil)
}

// startAgentAs runs `nfsdir agent` with attr (user, capabilities;
// nil: as the test, root) and waits until it listens.
func startAgentAs(t *testing.T, args []string, attr *syscall.SysProcAttr) *agentProc {
	t.Helper()
	p, out := tryAgent(t, args, attr)
	if p == nil {
		t.Fatalf("the quota agent does not listen: %s", out)
	}
	return p
}

// tryAgent runs the agent and returns it once it listens, or nil and what
// it wrote if it exits (or does not listen within 10 s).
func tryAgent(t *testing.T, args []string, attr *syscall.SysProcAttr) (*agentProc, string) {
	t.Helper()
	bin, err := exec.LookPath("nfsdir")
	if err != nil {
		t.Fatalf("the lab must carry the nfsdir binary: %v", err)
	}
	var out syncBuffer
	p := &agentProc{cmd: exec.Command(bin, args...), exited: make(chan struct{})}
	p.cmd.Stderr = io.MultiWriter(os.Stderr, &out)
	p.cmd.SysProcAttr = attr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.exited) }()
	for i := 0; i < 100; i++ {
		if conn, err := net.Dial("tcp", "127.0.0.1:29700"); err == nil {
			conn.Close()
			return p, ""
		}
		select {
		case <-p.exited:
			return nil, out.String()
		case <-time.After(100 * time.Millisecond):
		}
	}
	p.stop()
	return nil, "not listening after 10 s: " + out.String()
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}
func (b *syncBuffer) String() string { b.mu.Lock(); defer b.mu.Unlock(); return b.b.String() }

func dialAgent(t *testing.T, f lab.CertFiles, ca string) *serveragent.Client {
	t.Helper()
	cl := dialAgentErr(f, ca)
	if err := cl.Probe(context.Background()); err != nil {
		t.Fatalf("Probe: %v", err)
	}
	return cl
}

func dialAgentErr(f lab.CertFiles, ca string) *serveragent.Client {
	cfg, err := serveragent.ClientTLS(serveragent.Files{Cert: f.Cert, Key: f.Key, CA: ca}, serveragent.DefaultAgentIdentity)
	if err != nil {
		panic(err)
	}
	cl, _, err := serveragent.Dial("127.0.0.1:29700", cfg)
	if err != nil {
		panic(err)
	}
	return cl
}

// TestQuotaThroughTheController: a StorageClass naming the agent
// (quotaAgent): CreateVolume has the agent limit the volume to its
// capacity before answering; a writer on the published mount stops at the
// claim's size and df on the mount shows it; ControllerExpandVolume raises
// it; NodeGetVolumeStats reports the server's own figures for the
// project; with the agent down, CreateVolume is Unavailable with the
// reason and hands nothing out, and succeeds once it is back; DeleteVolume
// clears the project. On XFS (ENOSPC when full) and ext4 (EDQUOT).
func TestQuotaThroughTheController(t *testing.T) {
	lab.Require(t)
	for _, fs := range []struct {
		name, root, metrics string
		full                syscall.Errno
	}{
		{"xfs", lab.QuotaExport(), "127.0.0.1:29664", syscall.ENOSPC},
		{"ext4", lab.Ext4QuotaExport(), "127.0.0.1:29665", syscall.EDQUOT},
	} {
		t.Run(fs.name, func(t *testing.T) { quotaThroughTheController(t, fs.root, fs.metrics, fs.full) })
	}
}

// quotaThroughTheController runs TestQuotaThroughTheController on the
// export root, whose file system answers a full project with full.
func quotaThroughTheController(t *testing.T, root, metricsAddr string, full syscall.Errno) {
	ctx := context.Background()
	pki := lab.NewPKI(t)
	c := start(t, func(cfg *config.Config) {
		cfg.QuotaCert, cfg.QuotaKey, cfg.QuotaCA = pki.Client.Cert, pki.Client.Key, pki.CA
		cfg.CountEvery, cfg.CountRate = time.Second, 0
		cfg.MetricsAddress = metricsAddr
	})
	agentArgs := []string{"agent", "--listen", "127.0.0.1:29700", "--export", root + "=" + root,
		"--tls-cert", pki.Server.Cert, "--tls-key", pki.Server.Key, "--client-ca", pki.CA, "--projects", "6000-6099"}
	agent := startAgent(t, agentArgs)
	defer func() { agent.stop() }()
	p := params("share", root, "quotaAgent", "127.0.0.1:29700", "uid", strconv.Itoa(writer), "gid", strconv.Itoa(writer))
	create := func(name string, size int64) (*csi.Volume, error) {
		resp, err := c.Controller.CreateVolume(lab.Ctx(t, time.Minute), &csi.CreateVolumeRequest{Name: name, Parameters: p,
			VolumeCapabilities: []*csi.VolumeCapability{lab.RWX()}, CapacityRange: &csi.CapacityRange{RequiredBytes: size}})
		return resp.GetVolume(), err
	}
	began := time.Now()
	v, err := create("pvc-quota-ctl", 16<<20)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("CreateVolume with the quota agent: %v", time.Since(began))
	target := filepath.Join(t.TempDir(), "mnt")
	c.Publish(t, v, target, lab.RWX("nfsvers=4.2"), false)
	defer c.Unpublish(t, v, target)
	var st unix.Statfs_t
	if err := unix.Statfs(target, &st); err != nil || st.Blocks*uint64(st.Bsize) != 16<<20 {
		t.Errorf("df on the published volume: %d bytes, %v; want the claim's 16 MiB", st.Blocks*uint64(st.Bsize), err)
	}
	written, werr := fillAs(writer, filepath.Join(target, "big"), 32<<20)
	if !errors.Is(werr, full) || written > 16<<20 || written < 12<<20 {
		t.Errorf("writer on the published volume: %d bytes, then %v; want about 16 MiB, then %v", written, werr, full)
	}
	if _, err := c.Controller.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: v.VolumeId,
		CapacityRange: &csi.CapacityRange{RequiredBytes: 40 << 20}}); err != nil {
		t.Fatal(err)
	}
	if n, err := fillAs(writer, filepath.Join(target, "more"), 8<<20); err != nil {
		t.Errorf("after ControllerExpandVolume: %v after %d bytes", err, n)
	}
	if err := unix.Statfs(target, &st); err != nil || st.Blocks*uint64(st.Bsize) != 40<<20 {
		t.Errorf("df after the expansion: %d bytes, %v; want 40 MiB", st.Blocks*uint64(st.Bsize), err)
	}
	// The volume's usage is the server's own figure, from the agent: what
	// the project holds, exactly (checked here against the project's
	// usage read on the server side).
	fsq, err := quota.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer fsq.Close()
	f, _ := os.Open(filepath.Join(root, v.VolumeContext["subDir"]))
	project, _, _ := quota.Project(f)
	f.Close()
	// (XFS's speculative preallocation beyond a file's end counts until
	// it is trimmed: the server's figure settles within seconds.)
	var u quota.Usage
	waitStats(t, c, v, target, "from the quota agent", func(used, inodes, total, avail int64) bool {
		if u, err = fsq.Get(project); err != nil {
			t.Fatalf("project %d on the server: %v", project, err)
		}
		return used == int64(u.Bytes) && inodes == int64(u.Inodes) && total == 40<<20 && avail == 40<<20-used
	})
	t.Logf("NodeGetVolumeStats: used %d bytes, %d inodes: the server's figures for project %d", u.Bytes, u.Inodes, project)
	m := httpGet(t, "http://"+metricsAddr+"/metrics")
	if !regexp.MustCompile(`(?m)^nfsdir_usage_counts_from_quota_agent_total [1-9]`).MatchString(m) {
		t.Errorf("/metrics: no count answered by the quota agent:\n%s", m)
	}
	// The controller's calls to the agent, by method: the limit set at
	// CreateVolume and again at the expansion, the usage read.
	for _, want := range []string{
		`(?m)^nfsdir_agent_calls_total\{agent="127.0.0.1:29700",code="OK",method="Set"\} [2-9]`,
		`(?m)^nfsdir_agent_calls_total\{agent="127.0.0.1:29700",code="OK",method="Get"\} [1-9]`,
		`(?m)^nfsdir_agent_call_duration_seconds_count\{agent="127.0.0.1:29700",method="Set"\} [2-9]`,
	} {
		if !regexp.MustCompile(want).MatchString(m) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	agent.stop()
	if _, err := create("pvc-quota-down", 16<<20); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "127.0.0.1:29700") {
		t.Errorf("CreateVolume with the agent down: %v; want Unavailable naming the agent", err)
	}
	agent = startAgent(t, agentArgs)
	down, err := create("pvc-quota-down", 16<<20)
	if err != nil {
		t.Fatalf("CreateVolume retried once the agent is back: %v", err)
	}
	c.Unpublish(t, v, target)
	c.Delete(t, v)
	c.Delete(t, down)
	if u, err := fsq.Get(project); err != nil || u.Limits != (quota.Limits{}) {
		t.Errorf("project %d after DeleteVolume: %+v, %v; want no limits", project, u, err)
	}
}

// TestQuotaAgentWithLeastPrivilege: the agent runs as an unprivileged
// user (nobody) with only the capabilities the systemd unit of docs/capacity-and-quotas.md
// grants (CAP_SYS_ADMIN, CAP_FOWNER, CAP_DAC_READ_SEARCH), and does its
// whole job: it reads nfsdir's closed records, gives a volume a project
// and a limit a writer over NFS stops at, reports usage, and clears it.
// Without any one of the three, Set is refused with the reason, and the
// directory is left without a project or limit.
func TestQuotaAgentWithLeastPrivilege(t *testing.T) {
	ctx := context.Background()
	c := start(t, nil)
	root := lab.QuotaExport()
	pki := lab.NewPKI(t)
	args := append([]string{"agent", "--listen", "127.0.0.1:29700", "--export", root + "=" + root, "--projects", "7000-7099"},
		nobodysFiles(t, pki)...)
	const sysAdmin, fowner, dacReadSearch = unix.CAP_SYS_ADMIN, unix.CAP_FOWNER, unix.CAP_DAC_READ_SEARCH
	v := c.Create(t, "pvc-quota-least", params("share", root), lab.RWX())
	defer c.Delete(t, v)
	id, _ := volumeid.Parse(v.VolumeId)
	vol := serveragent.Volume{Share: root, SubDir: v.VolumeContext["subDir"], Token: id.Token}
	dir := filepath.Join(root, vol.SubDir)
	untouched := func(what string) {
		t.Helper()
		f, err := os.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if p, _, err := quota.Project(f); err != nil || p != 0 {
			t.Errorf("%s: the directory has project %d (%v); want none", what, p, err)
		}
	}
	for _, tt := range []struct {
		without string
		caps    []uintptr
	}{
		{"CAP_SYS_ADMIN", []uintptr{fowner, dacReadSearch}},
		{"CAP_FOWNER", []uintptr{sysAdmin, dacReadSearch}},
		{"CAP_DAC_READ_SEARCH", []uintptr{sysAdmin, fowner}},
	} {
		agent, out := tryAgent(t, args, asNobody(tt.caps...))
		if agent == nil {
			t.Logf("without %s the agent does not start: %s", tt.without, strings.TrimSpace(out))
			if !strings.Contains(out, "not permitted") && !strings.Contains(out, "permission denied") {
				t.Errorf("without %s: the agent exits without saying what it may not do: %q", tt.without, out)
			}
		} else {
			_, err := dialAgent(t, pki.Client, pki.CA).Set(ctx, &serveragent.SetRequest{Volume: vol, Bytes: 4 << 20})
			agent.stop()
			if err == nil {
				t.Errorf("without %s: Set succeeded", tt.without)
			} else {
				t.Logf("without %s: Set refused: %v", tt.without, err)
			}
		}
		untouched("without " + tt.without)
	}

	agent := startAgentAs(t, args, asNobody(sysAdmin, fowner, dacReadSearch))
	defer func() { agent.stop() }()
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(agent.cmd.Process.Pid) + "/status"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "Uid:") || strings.HasPrefix(l, "CapEff:") {
				t.Logf("agent %s", l)
			}
		}
	}
	cl := dialAgent(t, pki.Client, pki.CA)
	u, err := cl.Set(ctx, &serveragent.SetRequest{Volume: vol, Bytes: 4 << 20})
	if err != nil || u.Project < 7000 || u.Project > 7099 || u.LimitBytes != 4<<20 {
		t.Fatalf("Set with the three capabilities: %+v, %v", u, err)
	}
	mnt := nfsMount(t, lab.Server()+":"+root, "vers=4.2")
	if n, err := fill(filepath.Join(mnt, vol.SubDir, "big"), 8<<20); !errors.Is(err, syscall.ENOSPC) || n > 4<<20 {
		t.Errorf("writer through NFS: %d bytes, then %v; want at most 4 MiB, then ENOSPC", n, err)
	}
	if got, err := cl.Get(ctx, &vol); err != nil || got.Project != u.Project || got.Bytes < 2<<20 {
		t.Errorf("Get: %+v, %v", got, err)
	}
	if err := cl.Clear(ctx, &vol); err != nil {
		t.Fatalf("Clear: %v", err)
	}
	untouched("after Clear")
	if b, err := os.ReadFile(args[len(args)-1]); err != nil || !strings.Contains(string(b), `"op":"clear"`) {
		t.Errorf("audit log written as nobody: %q %v", b, err)
	}
}

// nobodysFiles copies the agent's certificates into a directory of
// nobody's, readable by it alone (as a systemd unit's files would be), and
// returns the agent's flags naming them and an audit log there.
func nobodysFiles(t *testing.T, pki lab.PKI) []string {
	t.Helper()
	own, err := os.MkdirTemp("", "quota-agent-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(own) })
	os.Chmod(own, 0o700)
	os.Chown(own, 65534, 65534)
	for _, f := range []string{pki.Server.Cert, pki.Server.Key, pki.CA} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(own, filepath.Base(f))
		if err := os.WriteFile(dst, b, 0o600); err != nil {
			t.Fatal(err)
		}
		os.Chown(dst, 65534, 65534)
	}
	return []string{"--tls-cert", filepath.Join(own, filepath.Base(pki.Server.Cert)), "--tls-key", filepath.Join(own, filepath.Base(pki.Server.Key)),
		"--client-ca", filepath.Join(own, filepath.Base(pki.CA)), "--audit-log", filepath.Join(own, "audit.log")}
}

// asNobody runs a process as nobody with exactly caps.
func asNobody(caps ...uintptr) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}, AmbientCaps: caps}
}
