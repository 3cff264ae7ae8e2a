package doccmds

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/vkubelet/vkubelet/internal/lab/controlplane"
	"github.com/vkubelet/vkubelet/internal/lab/crienv"
	"github.com/vkubelet/vkubelet/internal/lab/netns"
	"github.com/vkubelet/vkubelet/internal/lab/testenv"
)

// The README's quick start and the first commands of docs/DEPLOYING.md, typed
// as written into a shell in a scratch clone of this checkout: `make up` brings
// up the cluster and prints its export line; each command of the README's
// second block then succeeds (retried while the cluster catches up, as a user
// would type it again) and shows what its comment promises; `make image` and
// crane push the image, which the registry serves with the version
// `git describe` gives; the helm install creates the chart's Deployment; Ctrl-C
// stops `make up` and everything it started.
//
// What is not typed as written: `make test` (this test is part of it);
// registry.example.com, which is a registry the test runs; the port of
// `kubectl port-forward`, a free one; and `kubectl get node vkubelet -w`, which
// on this cluster would watch up's own node (the chart's node coming Ready is
// internal/lab/deploy's test, on a node that runs real containers).
func TestTheDocsCommandsWorkInAScratchClone(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: runs make up in a scratch clone (run without -short)")
	}
	// As root, up gives the node an address of its own, which the README's
	// stats and `kubectl top` commands need.
	testenv.Require(t, netns.Available())
	module, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(module, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	quick, err := Blocks(string(readme), "Quick start")
	if err != nil {
		t.Fatal(err)
	}
	if len(quick) < 2 || !slices.Equal(quick[0], []string{"make up", "make test"}) {
		t.Fatalf("the README's quick start is %q: want the two commands, then what to type once the node is up", quick)
	}
	deploying, err := os.ReadFile(filepath.Join(module, "docs", "DEPLOYING.md"))
	if err != nil {
		t.Fatal(err)
	}
	deploy, err := Blocks(string(deploying), "In three commands")
	if err != nil {
		t.Fatal(err)
	}
	if len(deploy) == 0 {
		t.Fatal("docs/DEPLOYING.md's first section has no commands")
	}

	dir := scratchClone(t, module)
	env := userEnv(t)
	sh := &shell{t: t, dir: dir, env: env}
	defer sh.stopBackground()

	// The quick start: make up, then the README's second block.
	up := sh.startUp("make up")
	sh.typeBlock(quick[1], up)

	// docs/DEPLOYING.md's first block (the README's "Deploy to a cluster" is the
	// same), against the same cluster.
	if deployReadme, err := Blocks(string(readme), "Deploy to a cluster"); err != nil || len(deployReadme) == 0 || !slices.Equal(deployReadme[0], deploy[0]) {
		t.Errorf("the README's \"Deploy to a cluster\" commands are not DEPLOYING's first ones (%v): %q", err, deployReadme)
	}
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(reg.Close)
	regHost := strings.TrimPrefix(reg.URL, "http://")
	helm, err := controlplane.EnsureHelm(context.Background(), os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	sh.exports = append(sh.exports, "export PATH="+filepath.Dir(helm)+":$PATH") // a user's helm
	for _, cmd := range deploy[0] {
		cmd = strings.ReplaceAll(cmd, "registry.example.com", regHost)
		if strings.HasSuffix(cmd, " -w") {
			t.Logf("not typed: %s (on this cluster it would watch up's own node)", cmd)
			continue
		}
		sh.run(cmd, expectations(cmd))
	}
	describe, err := exec.Command("git", "-C", dir, "describe", "--tags", "--always", "--dirty").Output()
	if err != nil {
		t.Fatal(err)
	}
	version := strings.TrimSpace(string(describe))
	ref, err := name.ParseReference(regHost + "/vkubelet:" + version)
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(ref)
	if err != nil {
		t.Fatalf("the image crane pushed: %v", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if got := cf.Config.Labels["org.opencontainers.image.version"]; got != version {
		t.Errorf("the pushed image says version %q, git describe %q", got, version)
	}
	sh.run("kubectl -n vkubelet-system get deployment vkubelet -o jsonpath={.spec.template.spec.containers[0].image}",
		func(out string) error {
			if want := regHost + "/vkubelet:" + version; out != want {
				return fmt.Errorf("the chart's Deployment runs %q, want %q", out, want)
			}
			return nil
		})
	sh.stopBackground()
	up.interrupt(t)

	// The README's real containers: up with the CRI provider, a container, and
	// a web app with its client through a Service and the cluster DNS.
	cri, err := Blocks(string(readme), "Real containers: the CRI provider")
	if err != nil {
		t.Fatal(err)
	}
	if len(cri) != 2 || len(cri[0]) == 0 || !strings.HasPrefix(cri[0][0], "bin/vkubeletctl up --provider cri") {
		t.Fatalf("the README's CRI section is %q: want up --provider cri, then the web app", cri)
	}
	testenv.Require(t, crienv.Available())
	up = sh.startUp(cri[0][0])
	sh.typeBlock(cri[0][1:], up)
	sh.typeBlock(cri[1], up)
	sh.stopBackground()
	up.interrupt(t)
}

// typeBlock types a block of the docs' commands: export lines (the README's
// export KUBECONFIG line is the one up printed), commands to leave running
// (ending in & or a port-forward, started in the background with a free local
// port, and checked), and the others, retried until they do what the docs say.
func (s *shell) typeBlock(cmds []string, up *upRun) {
	s.t.Helper()
	if !slices.ContainsFunc(cmds, func(c string) bool { return strings.HasPrefix(c, "export KUBECONFIG=") }) {
		// A block without the export line: the user pasted the one up printed.
		s.exports = append(s.exports, up.exportLine)
	}
	for _, cmd := range cmds {
		switch {
		case strings.HasPrefix(cmd, "export KUBECONFIG="):
			s.exports = append(s.exports, up.exportLine) // "the line make up printed"
		case strings.HasPrefix(cmd, "export "):
			s.exports = append(s.exports, cmd)
		case strings.HasSuffix(cmd, "&") || strings.Contains(cmd, "port-forward"):
			port := testenv.FreePort(s.t)
			cmd = strings.TrimSpace(strings.TrimSuffix(cmd, "&"))
			cmd = strings.Replace(cmd, " 8080:", " "+strconv.Itoa(port)+":", 1)
			s.start(cmd)
			switch {
			case strings.Contains(cmd, "port-forward pod/hello"):
				checkEcho(s.t, port)
			case strings.Contains(cmd, "port-forward svc/web"):
				checkHTTP(s.t, port, "hello from web")
			}
		default:
			s.run(cmd, expectations(cmd))
		}
	}
}

// expectations checks what the docs' comments promise a command prints.
func expectations(cmd string) func(string) error {
	contains := func(want ...string) func(string) error {
		return func(out string) error {
			for _, w := range want {
				if !strings.Contains(out, w) {
					return fmt.Errorf("no %q in the output", w)
				}
			}
			return nil
		}
	}
	switch {
	case strings.HasPrefix(cmd, "kubectl get nodes"):
		return contains("vkubelet", "Ready")
	case strings.HasPrefix(cmd, "kubectl get pods"):
		return func(out string) error {
			for _, l := range strings.Split(out, "\n") {
				if strings.HasPrefix(l, "hello ") && strings.Contains(l, "Running") && strings.Contains(l, " vkubelet ") {
					return nil
				}
			}
			return fmt.Errorf("hello is not Running on node vkubelet")
		}
	case cmd == "kubectl logs hello": // the mock's
		return contains("hello", "world")
	case strings.HasPrefix(cmd, "kubectl logs hello;"): // a real container's
		return contains("hello from a real container", "PID", "sleep 3600")
	case strings.HasPrefix(cmd, "kubectl logs client"):
		return contains("web.default.svc.cluster.local", "hello from web")
	case strings.HasPrefix(cmd, "kubectl exec hello -- echo"):
		return contains("hi")
	case strings.Contains(cmd, "/stats/summary"):
		return contains(`"nodeName":"vkubelet"`, `"pods"`)
	case strings.HasPrefix(cmd, "kubectl top node"):
		return contains("vkubelet", "hello")
	}
	return nil
}

// scratchClone is a clone of module's repository with the checkout's changes
// (modified, new and deleted files) applied: what a fresh clone of this tree
// would be, without its build outputs.
func scratchClone(t *testing.T, module string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "vkubelet")
	git := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("git", args...).Output()
		if err != nil {
			t.Fatalf("git %s: %v", strings.Join(args, " "), err)
		}
		return string(out)
	}
	git("clone", "-q", module, dir)
	for _, f := range strings.Split(git("-C", module, "ls-files", "-z", "-m", "-o", "--exclude-standard"), "\x00") {
		if f == "" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(module, f))
		if os.IsNotExist(err) {
			continue // deleted: listed by -d below
		}
		if err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(filepath.Join(module, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, st.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range strings.Split(git("-C", module, "ls-files", "-z", "-d"), "\x00") {
		if f != "" {
			_ = os.Remove(filepath.Join(dir, f))
		}
	}
	return dir
}

// userEnv is the environment of the user typing the commands: this process's,
// with a cache directory of its own for up's state (VKUBELET_CACHE) whose
// built binaries are the shared cache's, so that nothing is built twice.
func userEnv(t *testing.T) []string {
	t.Helper()
	shared, err := controlplane.CacheDir()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(shared, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	if err := os.Symlink(filepath.Join(shared, "bin"), filepath.Join(cache, "bin")); err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "VKUBELET_CACHE=") && !strings.HasPrefix(kv, "KUBECONFIG=") {
			env = append(env, kv)
		}
	}
	return append(env, "VKUBELET_CACHE="+cache)
}

// upRun is a running `make up` or `vkubeletctl up`.
type upRun struct {
	cmd        *exec.Cmd
	out        *testenv.Buffer
	exportLine string
	done       chan error
}

// startUp types cmd, which runs up in the foreground, and waits for the
// export line it prints once its node is Ready.
func (s *shell) startUp(cmd string) *upRun {
	t := s.t
	t.Helper()
	u := &upRun{out: &testenv.Buffer{}, done: make(chan error, 1)}
	u.cmd = exec.Command("bash", "-c", "exec "+cmd)
	u.cmd.Dir, u.cmd.Env = s.dir, s.env
	// Its own process group, as a terminal's foreground job: Ctrl-C reaches
	// it and everything it started.
	u.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	u.cmd.Stdout, u.cmd.Stderr = u.out, u.out
	start := time.Now()
	if err := u.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { u.done <- u.cmd.Wait() }()
	t.Cleanup(func() {
		_ = syscall.Kill(-u.cmd.Process.Pid, syscall.SIGKILL)
		select {
		case <-u.done:
		case <-time.After(30 * time.Second):
		}
	})
	deadline := time.After(10 * time.Minute)
	for u.exportLine == "" {
		select {
		case err := <-u.done:
			t.Fatalf("%s ended (%v) before printing its export line:\n%s", cmd, err, u.out.String())
		case <-deadline:
			t.Fatalf("%s printed no export line in 10 minutes:\n%s", cmd, u.out.String())
		case <-time.After(500 * time.Millisecond):
		}
		for _, l := range strings.Split(u.out.String(), "\n") {
			if strings.HasPrefix(l, "export KUBECONFIG=") {
				u.exportLine = strings.TrimSpace(l)
			}
		}
	}
	t.Logf("$ %s: the node is up (%s): %s", cmd, time.Since(start).Round(100*time.Millisecond), u.exportLine)
	return u
}

// interrupt is Ctrl-C: up ends, with every process it started.
func (u *upRun) interrupt(t *testing.T) {
	t.Helper()
	if err := syscall.Kill(-u.cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-u.done:
	case <-time.After(time.Minute):
		t.Fatalf("up did not end within a minute of Ctrl-C:\n%s", u.out.String())
	}
	// The group is empty once every process in it has exited.
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		err := syscall.Kill(-u.cmd.Process.Pid, 0)
		return err == syscall.ESRCH, fmt.Sprintf("processes of up still run after Ctrl-C (kill -0: %v)", err)
	})
}

// shell types commands in a scratch clone with the user's environment and the
// exports typed so far.
type shell struct {
	t          *testing.T
	dir        string
	env        []string
	exports    []string
	background []*exec.Cmd
}

func (s *shell) command(cmd string) *exec.Cmd {
	c := exec.Command("bash", "-c", strings.Join(append(append([]string{}, s.exports...), cmd), "\n"))
	c.Dir, c.Env = s.dir, s.env
	return c
}

// run runs cmd until it succeeds and check (if any) accepts its output, for up
// to three minutes: a command that creates something is not typed again once
// it said so.
func (s *shell) run(cmd string, check func(string) error) {
	s.t.Helper()
	start := time.Now()
	var last string
	for time.Since(start) < 3*time.Minute {
		out, err := s.command(cmd).CombinedOutput()
		last = fmt.Sprintf("%v\n%s", err, out)
		if err == nil && (check == nil || check(string(out)) == nil) {
			s.t.Logf("$ %s (%s)", cmd, time.Since(start).Round(100*time.Millisecond))
			return
		}
		if err != nil && bytes.Contains(out, []byte("AlreadyExists")) {
			s.t.Logf("$ %s: created by an earlier try", cmd)
			return
		}
		if err == nil && check != nil {
			last = fmt.Sprintf("%v\n%s", check(string(out)), out)
		}
		time.Sleep(2 * time.Second)
	}
	s.t.Fatalf("$ %s: not as the docs say after 3 minutes: %s", cmd, last)
}

// start starts cmd in the background, in a process group of its own.
func (s *shell) start(cmd string) {
	s.t.Helper()
	c := s.command(cmd)
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.Start(); err != nil {
		s.t.Fatal(err)
	}
	s.background = append(s.background, c)
	s.t.Logf("$ %s &", cmd)
}

// stopBackground ends the commands started in the background.
func (s *shell) stopBackground() {
	for _, c := range s.background {
		_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
		_ = c.Wait()
	}
	s.background = nil
}

// checkEcho checks that what is sent to port comes back: the mock echoes
// whatever a port-forward sends.
func checkEcho(t *testing.T, port int) {
	t.Helper()
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		conn, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), 2*time.Second)
		if err != nil {
			return false, err.Error()
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := conn.Write([]byte("ping\n")); err != nil {
			return false, err.Error()
		}
		line, err := bufio.NewReader(conn).ReadString('\n')
		return line == "ping\n", fmt.Sprintf("port-forward answered %q, %v", line, err)
	})
}

// checkHTTP checks that a GET of / on port answers with want in its body.
func checkHTTP(t *testing.T, port int, want string) {
	t.Helper()
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(port) + "/")
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return err == nil && strings.Contains(string(b), want), fmt.Sprintf("GET through the port-forward: %s %q, %v", resp.Status, b, err)
	})
}
