// Package crienv gives the CRI provider's tests a real container runtime: a private
// containerd (its own config, root, state directory and socket in a temporary
// directory) and an in-process image registry on 127.0.0.1 that serves small images
// built from Debian's busybox-static, so that the real pull path runs without any
// outside registry.
//
// The registry also stands in for Docker Hub's library/busybox, so that
// `kubectl run x --image=busybox` works on a machine without internet access: the
// tests and `vkubeletctl up --provider cri` use it. It needs root, containerd, runc,
// busybox-static and the CNI plugins, which scripts/setup.sh installs; Start reports
// which one is missing.
package crienv

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/vkubelet/vkubelet/internal/lab/netns"
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

// Available says why Start cannot work on this machine, or nil: containerd
// needs root, containerd, runc and the CNI plugins (scripts/setup.sh --cri
// installs them).
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("crienv: containerd needs root")
	}
	for _, bin := range []string{"containerd", "runc", "containerd-shim-runc-v2"} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("crienv: %s not found (scripts/setup.sh --cri installs it): %w", bin, err)
		}
	}
	if _, err := os.Stat(filepath.Join(CNIBinDir, "bridge")); err != nil {
		return fmt.Errorf("crienv: CNI plugins missing (scripts/setup.sh --cri installs them): %w", err)
	}
	return nil
}

// Start builds the images, starts the registry and containerd, and waits until the
// CRI answers. It fails with a clear message when a prerequisite is missing.
func Start(ctx context.Context) (*Env, error) { return StartWith(ctx, Options{}) }

// StartWith is Start with options.
func StartWith(ctx context.Context, opts Options) (*Env, error) {
	if err := Available(); err != nil {
		return nil, err
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

// Stop removes every sandbox left, stops containerd and the registry, and removes
// the directory. It is safe to call on a partly started Env.
func (e *Env) Stop() {
	if e.cmd != nil {
		if conn, err := e.Conn(); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			rt := runtimeapi.NewRuntimeServiceClient(conn)
			if list, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{}); err == nil {
				for _, s := range list.Items {
					// A second stop often clears what failed the first
					// removal (a CNI teardown of a network gone already).
					for range 3 {
						_, _ = rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: s.Id})
						if _, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: s.Id}); err == nil {
							break
						}
					}
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
		e.killShims()
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

// killShims kills the shims this containerd started, with whatever runs under
// them. A shim leaves containerd's process group on purpose (containers run on
// across a restart of containerd), so stopping containerd leaves it running,
// idle for good, wherever a sandbox could not be removed first (a failed CNI
// teardown, a containerd that would not answer).
func (e *Env) killShims() {
	children := map[int][]int{} // by parent pid
	var shims []int
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, stat := range stats {
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(stat)))
		if err != nil {
			continue
		}
		if ppid, ok := parentPID(stat); ok {
			children[ppid] = append(children[ppid], pid)
		}
		args, err := os.ReadFile(filepath.Join(filepath.Dir(stat), "cmdline"))
		if err != nil {
			continue
		}
		argv := strings.Split(string(args), "\x00")
		if strings.HasPrefix(filepath.Base(argv[0]), "containerd-shim") && slices.Contains(argv, e.Socket) {
			shims = append(shims, pid)
		}
	}
	for len(shims) > 0 { // each shim, then what it started
		pid := shims[0]
		shims = append(shims[1:], children[pid]...)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// parentPID reads the parent's pid from a /proc/<pid>/stat file: the field
// after the command's name, which is in parentheses and may hold spaces.
func parentPID(stat string) (int, bool) {
	b, err := os.ReadFile(stat)
	if err != nil {
		return 0, false
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:])) // state, ppid, ...
	if len(f) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	return ppid, err == nil
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
