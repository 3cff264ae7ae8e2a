package crienv

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/vkubelet/vkubelet/internal/lab/spawn"
)

// This file holds the private containerd: its configuration (registry mirrors, a
// CNI bridge on a free pod network), its start, and the check that its CRI answers.

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
	// restrict_oom_score_adj: containerd sets no score below its own, where a
	// kubelet's node lets it set a guaranteed pod's -997. Machines without
	// CAP_SYS_RESOURCE (containers, sandboxes such as the project's CI) refuse
	// any negative score, and runc would fail every sandbox (the pause
	// container's -998) instead.
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

	var last error
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if last = e.ping(ctx); last == nil {
			return true, nil
		}
		select {
		case werr := <-e.done:
			e.cmd = nil
			return false, fmt.Errorf("crienv: containerd exited (%v): %s", werr, e.logTail())
		default:
			return false, nil
		}
	})
	if wait.Interrupted(err) {
		return fmt.Errorf("crienv: containerd not ready within 30s (%v): %w: %s", last, err, e.logTail())
	}
	return err
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
