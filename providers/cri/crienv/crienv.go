// Package crienv gives the CRI provider's tests a real container runtime: a private
// containerd (its own config, root, state directory and socket in a temporary
// directory) and an in-process image registry on 127.0.0.1 that serves small images
// built from Debian's busybox-static, so that the real pull path runs without any
// outside registry.
//
// The registry also stands in for Docker Hub's library/busybox, so that
// `kubectl run x --image=busybox` works on a machine without internet access: the
// tests and `vkubelet up --provider cri` use it. It needs root, containerd, runc,
// busybox-static and the CNI plugins, which scripts/setup.sh installs; Start reports
// which one is missing.
package crienv

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/vkubelet/vkubelet/internal/lab/netns"
	"github.com/vkubelet/vkubelet/internal/lab/spawn"
)

// The credentials the registry asks for images under private/.
const (
	PrivateUser     = "puller"
	PrivatePassword = "s3cret"
)

// CNIBinDir is where Debian's containernetworking-plugins puts the plugins.
const CNIBinDir = "/usr/lib/cni"

// Env is a running containerd and registry. Stop ends both.
type Env struct {
	Dir      string // the temporary directory holding everything below
	Socket   string // containerd's CRI socket
	Registry string // host:port of the registry
	// Images by role, as references containerd pulls.
	Busybox        string // busybox, entrypoint /bin/sh
	Busybox2       string // the same image under another tag
	PrivateBusybox string // the same image, only with PrivateUser/PrivatePassword
	Pause          string // the sandbox image: sleeps forever

	// PodCIDR is the pod network of the CNI bridge: pods get their IPs from it.
	PodCIDR string

	cmd       *exec.Cmd
	done      chan error
	server    *http.Server
	bridge    string
	link      *netns.Link
	forwarder *netns.Forwarder // the registry, inside link's namespace
	ContLogs  string           // containerd's log file
}

// Options change where containerd runs.
type Options struct {
	// Netns, if set, runs containerd inside this network namespace, as on a node
	// of its own: the CNI bridge and the pods' network live there, out of the
	// host's way, so that a kube-proxy in the same namespace can program their
	// Services without touching the host's firewall or another node's. The
	// registry is forwarded into the namespace, CRI streaming (exec, attach,
	// port-forward) listens on the namespace's address, and the host routes the
	// pod network into the namespace (for probes, and the API server's proxy).
	Netns *netns.Link
}

// Start builds the images, starts the registry and containerd, and waits until the
// CRI answers. It fails with a clear message when a prerequisite is missing.
func Start(ctx context.Context) (*Env, error) { return StartWith(ctx, Options{}) }

// StartWith is Start with options.
func StartWith(ctx context.Context, opts Options) (*Env, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("crienv: containerd needs root")
	}
	for _, bin := range []string{"containerd", "runc", "containerd-shim-runc-v2"} {
		if _, err := exec.LookPath(bin); err != nil {
			return nil, fmt.Errorf("crienv: %s not found (run scripts/setup.sh): %w", bin, err)
		}
	}
	if _, err := os.Stat(filepath.Join(CNIBinDir, "bridge")); err != nil {
		return nil, fmt.Errorf("crienv: CNI plugins missing (run scripts/setup.sh): %w", err)
	}
	dir, err := os.MkdirTemp("", "crienv-")
	if err != nil {
		return nil, err
	}
	e := &Env{Dir: dir, Socket: filepath.Join(dir, "containerd.sock"), done: make(chan error, 1), link: opts.Netns}
	if err := e.serveImages(); err != nil {
		return nil, err
	}
	if e.link != nil {
		// The same address inside the namespace, so that image references and
		// containerd's registry configuration hold on both sides.
		if e.forwarder, err = e.link.Forward(e.Registry, e.Registry); err != nil {
			e.Stop()
			return nil, fmt.Errorf("crienv: %w", err)
		}
	}
	if err := e.startContainerd(ctx); err != nil {
		e.Stop()
		return nil, err
	}
	return e, nil
}

// StartRegistry starts only the registry, with the same images, for tests and
// providers that pull with another runtime (the Slurm provider's podman). Stop
// ends it and removes the directory.
func StartRegistry() (*Env, error) {
	dir, err := os.MkdirTemp("", "crienv-registry-")
	if err != nil {
		return nil, err
	}
	e := &Env{Dir: dir, done: make(chan error, 1)}
	if err := e.serveImages(); err != nil {
		return nil, err
	}
	return e, nil
}

// serveImages starts the registry and pushes the images; on failure it stops
// what it started.
func (e *Env) serveImages() error {
	if err := e.startRegistry(); err != nil {
		e.Stop()
		return err
	}
	if err := e.pushImages(); err != nil {
		e.Stop()
		return err
	}
	return nil
}

func (e *Env) startRegistry() error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("crienv: registry listen: %w", err)
	}
	e.Registry = ln.Addr().String()
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	want := "Basic " + base64.StdEncoding.EncodeToString([]byte(PrivateUser+":"+PrivatePassword))
	e.server = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// Pulls of private/ need the credentials; pushes (from this process) do not.
			if strings.HasPrefix(r.URL.Path, "/v2/private/") && (r.Method == http.MethodGet || r.Method == http.MethodHead) &&
				r.Header.Get("Authorization") != want && r.Header.Get("X-Crienv-Push") == "" {
				w.Header().Set("WWW-Authenticate", `Basic realm="crienv"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			reg.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() { _ = e.server.Serve(ln) }()
	return nil
}

// busyboxLayer is a root filesystem with /bin/busybox and a link for each applet.
func busyboxLayer() (v1.Layer, error) {
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		return nil, fmt.Errorf("crienv: busybox-static missing (run scripts/setup.sh): %w", err)
	}
	out, err := exec.Command("/bin/busybox", "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("crienv: busybox --list: %w", err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	now := time.Unix(0, 0)
	for _, d := range []string{"bin", "etc", "tmp", "proc", "sys", "dev", "root", "var", "var/www"} {
		mode := int64(0o755)
		if d == "tmp" {
			mode = 0o1777
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: mode, ModTime: now}); err != nil {
			return nil, err
		}
	}
	files := map[string]string{
		"etc/passwd":         "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n",
		"etc/group":          "root:x:0:\nnogroup:x:65534:\n",
		"var/www/index.html": "hello from busybox\n",
	}
	for n, data := range files {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: n, Mode: 0o644, Size: int64(len(data)), ModTime: now}); err != nil {
			return nil, err
		}
		if _, err := tw.Write([]byte(data)); err != nil {
			return nil, err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "bin/busybox", Mode: 0o755, Size: int64(len(bb)), ModTime: now}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(bb); err != nil {
		return nil, err
	}
	for _, applet := range strings.Fields(string(out)) {
		if applet == "busybox" {
			continue
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + applet, Linkname: "busybox", Mode: 0o777, ModTime: now}); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
}

func image(layer v1.Layer, entrypoint, cmd []string) (v1.Image, error) {
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config.Entrypoint, cf.Config.Cmd = entrypoint, cmd
	cf.Config.Env = []string{"PATH=/bin"}
	return mutate.ConfigFile(img, cf)
}

func (e *Env) pushImages() error {
	layer, err := busyboxLayer()
	if err != nil {
		return err
	}
	busybox, err := image(layer, nil, []string{"/bin/sh"})
	if err != nil {
		return err
	}
	pause, err := image(layer, []string{"/bin/sleep", "2147483647"}, nil)
	if err != nil {
		return err
	}
	e.Busybox = e.Registry + "/busybox:1"
	e.Busybox2 = e.Registry + "/busybox:2"
	e.PrivateBusybox = e.Registry + "/private/busybox:1"
	e.Pause = e.Registry + "/pause:1"
	// docker.io/library/busybox:latest, which containerd asks this registry for
	// (certs.d/docker.io/hosts.toml).
	hubBusybox := e.Registry + "/library/busybox:latest"
	push := remote.WithTransport(headerTransport{})
	for ref, img := range map[string]v1.Image{e.Busybox: busybox, e.Busybox2: busybox, e.PrivateBusybox: busybox, e.Pause: pause, hubBusybox: busybox} {
		r, err := name.ParseReference(ref, name.Insecure)
		if err != nil {
			return err
		}
		if err := remote.Write(r, img, push); err != nil {
			return fmt.Errorf("crienv: push %s: %w", ref, err)
		}
	}
	return nil
}

// headerTransport marks this process's own requests, which bypass the auth check.
type headerTransport struct{}

func (headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-Crienv-Push", "1")
	return http.DefaultTransport.RoundTrip(r)
}

func (e *Env) startContainerd(ctx context.Context) error {
	// A bridge of our own, so that parallel runs do not share one.
	e.bridge = fmt.Sprintf("vkb%d", os.Getpid()%100000)
	e.PodCIDR = fmt.Sprintf("10.244.%d.0/24", freeSubnet())
	streamAddress := "127.0.0.1"
	if e.link != nil {
		e.bridge = "cni0" // alone in its namespace
		streamAddress = e.link.NodeIP
	}
	dirs := map[string]string{
		"certs": filepath.Join(e.Dir, "certs.d", e.Registry),
		"cni":   filepath.Join(e.Dir, "cni", "net.d"),
		"ipam":  filepath.Join(e.Dir, "cni", "ipam"),
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	hosts := fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", "http://"+e.Registry, "http://"+e.Registry)
	if err := os.WriteFile(filepath.Join(dirs["certs"], "hosts.toml"), []byte(hosts), 0o644); err != nil {
		return err
	}
	// Docker Hub is out of reach: its images come from this registry instead.
	hub := filepath.Join(e.Dir, "certs.d", "docker.io")
	if err := os.MkdirAll(hub, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(hub, "hosts.toml"), []byte(hosts), 0o644); err != nil {
		return err
	}
	cni := fmt.Sprintf(`{"cniVersion": "0.4.0", "name": "crienv", "plugins": [
  {"type": "bridge", "bridge": %q, "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": %q, "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}
]}`, e.bridge, dirs["ipam"], e.PodCIDR)
	if err := os.WriteFile(filepath.Join(dirs["cni"], "10-crienv.conflist"), []byte(cni), 0o644); err != nil {
		return err
	}
	cfg := fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.internal.v1.opt", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = %[3]q

[ttrpc]
  address = %[4]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[5]q
  restrict_oom_score_adj = true
  stream_server_address = %[9]q
  stream_server_port = "0"
  enable_selinux = false
  max_container_log_line_size = 16384
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[6]q
    conf_dir = %[7]q
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = %[8]q
`, filepath.Join(e.Dir, "root"), filepath.Join(e.Dir, "state"), e.Socket, e.Socket+".ttrpc",
		e.Pause, CNIBinDir, dirs["cni"], filepath.Join(e.Dir, "certs.d"), streamAddress)
	cfgPath := filepath.Join(e.Dir, "containerd.toml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return err
	}
	e.ContLogs = filepath.Join(e.Dir, "containerd.log")
	logf, err := os.Create(e.ContLogs)
	if err != nil {
		return err
	}
	defer logf.Close()
	e.cmd = exec.Command("containerd", "--config", cfgPath)
	if e.link != nil {
		e.cmd = e.link.Command("containerd", "--config", cfgPath)
		if err := e.link.Route(e.PodCIDR); err != nil {
			return fmt.Errorf("crienv: %w", err)
		}
	}
	e.cmd.Stdout, e.cmd.Stderr = logf, logf
	if err := spawn.Start(e.cmd); err != nil {
		return fmt.Errorf("crienv: start containerd: %w", err)
	}
	go func() { e.done <- e.cmd.Wait() }()

	deadline := time.Now().Add(30 * time.Second)
	for {
		err := e.ping(ctx)
		if err == nil {
			return nil
		}
		select {
		case werr := <-e.done:
			e.cmd = nil
			return fmt.Errorf("crienv: containerd exited (%v): %s", werr, e.logTail())
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("crienv: containerd not ready after 30s (%v): %s", err, e.logTail())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// RemovePodCgroups removes the cgroups the CRI provider made for the pod uid (its
// sandboxes' cgroup parent is /vkubelet/pod<uid>), which the runtime leaves
// behind, deepest first: for pods left running at the end, and the benchmark's.
func RemovePodCgroups(uid string) {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, root := range append(roots, "/sys/fs/cgroup") {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(root, "vkubelet", "pod"+uid), func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			_ = os.Remove(dirs[i])
		}
	}
}

// freeSubnet picks X for a 10.244.X.0/24 pod network that no interface of the host
// is on yet and no route of the host leads to (a network in a namespace), so that
// parallel test processes get a network each.
func freeSubnet() int {
	used := map[int]bool{}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				if ip := n.IP.To4(); ip != nil && ip[0] == 10 && ip[1] == 244 {
					used[int(ip[2])] = true
				}
			}
		}
	}
	for _, x := range routedSubnets() {
		used[x] = true
	}
	start := os.Getpid() % 100
	for i := range 100 {
		if x := 100 + (start+i)%100; !used[x] {
			return x
		}
	}
	return 100 + start
}

// routedSubnets lists X of the host's routes to 10.244.X.0/24.
func routedSubnets() []int {
	b, err := os.ReadFile("/proc/net/route")
	if err != nil {
		return nil
	}
	var xs []int
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 8 || len(f[1]) != 8 {
			continue
		}
		// Destination in hex, little-endian: 10.244.X.0 is 00 X F4 0A.
		var d [4]byte
		if _, err := fmt.Sscanf(f[1], "%02x%02x%02x%02x", &d[3], &d[2], &d[1], &d[0]); err == nil && d[0] == 10 && d[1] == 244 {
			xs = append(xs, int(d[2]))
		}
	}
	return xs
}

func (e *Env) logTail() string {
	b, _ := os.ReadFile(e.ContLogs)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// Conn dials containerd's CRI socket.
func (e *Env) Conn() (*grpc.ClientConn, error) {
	return grpc.NewClient("unix://"+e.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// ImportImage loads an image archive (an OCI layout or `docker save` tar) into
// containerd's k8s.io namespace, where the CRI finds it, with containerd's own
// `ctr images import`, as an operator loads an image onto a node without a
// registry. It returns what ctr printed.
func (e *Env) ImportImage(ctx context.Context, archive string) (string, error) {
	return e.Ctr(ctx, "images", "import", archive)
}

// Ctr runs containerd's ctr client against this containerd, in the k8s.io
// namespace, and returns its combined output.
func (e *Env) Ctr(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "ctr", append([]string{"--address", e.Socket, "--namespace", "k8s.io"}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("crienv: ctr %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

func (e *Env) ping(ctx context.Context) error {
	conn, err := e.Conn()
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := runtimeapi.NewRuntimeServiceClient(conn).Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		return err
	}
	for _, c := range resp.GetStatus().GetConditions() {
		if c.Type == runtimeapi.RuntimeReady && !c.Status {
			return fmt.Errorf("runtime not ready: %s", c.Message)
		}
	}
	return nil
}

// Stop removes every sandbox left, stops containerd and the registry, and removes
// the directory. It is safe to call on a partly started Env.
func (e *Env) Stop() {
	if e.cmd != nil {
		if conn, err := e.Conn(); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			rt := runtimeapi.NewRuntimeServiceClient(conn)
			if list, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{}); err == nil {
				for _, s := range list.Items {
					_, _ = rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: s.Id})
					_, _ = rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: s.Id})
					RemovePodCgroups(s.GetMetadata().GetUid())
				}
			}
			cancel()
			conn.Close()
		}
		_ = syscall.Kill(-e.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-e.done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-e.cmd.Process.Pid, syscall.SIGKILL)
			<-e.done
		}
	}
	if e.forwarder != nil {
		_ = e.forwarder.Close()
	}
	if e.server != nil {
		_ = e.server.Close()
	}
	if e.link != nil && e.PodCIDR != "" {
		_ = exec.Command("ip", "route", "delete", e.PodCIDR, "via", e.link.NodeIP).Run()
	} else if e.bridge != "" {
		_ = exec.Command("ip", "link", "delete", e.bridge).Run()
	}
	// Snapshots that containerd left mounted would make RemoveAll fail.
	_ = RemoveAllMounted(e.Dir)
}

// RemoveAllMounted removes dir after unmounting whatever a runtime left mounted
// under it (snapshots, a container's /dev/shm).
func RemoveAllMounted(dir string) error {
	if mounts, err := os.ReadFile("/proc/self/mounts"); err == nil {
		for _, line := range strings.Split(string(mounts), "\n") {
			if f := strings.Fields(line); len(f) > 1 && strings.HasPrefix(f[1], dir+"/") {
				_ = syscall.Unmount(f[1], syscall.MNT_DETACH)
			}
		}
	}
	return os.RemoveAll(dir)
}
