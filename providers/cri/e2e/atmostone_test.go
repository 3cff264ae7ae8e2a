package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/internal/lab/testenv/nodetest"
	"github.com/vkubelet/vkubelet/internal/process/agent"
	"github.com/vkubelet/vkubelet/pod"
	"github.com/vkubelet/vkubelet/providers/cri/crienv"
)

// A StatefulSet's pod deleted while its runtime cannot stop it (its
// containerd shim frozen with SIGSTOP, so that no signal reaches the
// container, as with a runtime that hangs) stays Terminating past its grace
// period, with the StopNotConfirmed Event, and no replacement reaches
// containerd; once the shim runs again the old copy stops and the replacement
// starts. containerd, read every 50 ms all along, never runs containers of two
// db-0 pods at once.
func TestAStatefulSetsPodIsNeverRunTwiceInContainerd(t *testing.T) {
	const node = "cri-at-most-one"
	env, rt := startAtMostOneNode(t, node)
	ns := testenv.Namespace(t)
	watch := watchCopies(t, rt, "db-0")

	held := func(old types.UID) (bool, string) {
		reasons := testenv.EventReasons(t, ns, old)
		return slices.Contains(reasons, pod.ReasonStopNotConfirmed),
			fmt.Sprintf("events of the old pod: %v, want a %s", reasons, pod.ReasonStopNotConfirmed)
	}
	old, replacement := replaceWithFrozenShim(t, env, rt, watch, ns, node, held)
	watch.stop(t, replacement)
	if n := watch.overlapping(); n != 0 {
		t.Fatalf("containerd ran %d pods named db-0 beside an earlier copy, want none", n)
	}
	t.Logf("replacement %s ran in containerd only after the old pod %s stopped (%s)", replacement, old, watch)
}

// With --remove-unconfirmed-after the node removes the unconfirmed pod from
// the API a second after its grace period, and the StatefulSet creates the
// replacement while the old copy still runs; the CRI provider, which keeps
// pods by name, refuses to start it (ProviderFailed, an earlier pod of that
// name is still stopping) until the old copy has stopped: containerd still
// never runs two. (The mock runs both: TestRemoveUnconfirmedAfterLetsTwoCopiesRun.
// A CRI provider that started the replacement beside the old copy would fail
// this test with the one overlap: the watch sees two copies when there are.)
func TestRemoveUnconfirmedAfterStillRunsOneCopyInContainerd(t *testing.T) {
	const node = "cri-remove-unconfirmed"
	env, rt := startAtMostOneNode(t, node, func(cfg *agent.Config) { cfg.RemoveUnconfirmedAfter = time.Second })
	ns := testenv.Namespace(t)
	watch := watchCopies(t, rt, "db-0")
	c := testenv.Client(t)

	refused := func(old types.UID) (bool, string) {
		p, err := c.CoreV1().Pods(ns).Get(context.Background(), "db-0", metav1.GetOptions{})
		if err != nil {
			return false, "db-0: " + err.Error()
		}
		if p.UID == old {
			return false, fmt.Sprintf("the old db-0 is still in the API (deleting: %v)", p.DeletionTimestamp != nil)
		}
		reasons := testenv.EventReasons(t, ns, p.UID)
		return slices.Contains(reasons, pod.ReasonProviderFailed),
			fmt.Sprintf("events of the replacement %s: %v, want a %s", p.UID, reasons, pod.ReasonProviderFailed)
	}
	old, replacement := replaceWithFrozenShim(t, env, rt, watch, ns, node, refused)
	watch.stop(t, replacement)
	if n := watch.overlapping(); n != 0 {
		t.Fatalf("containerd ran %d pods named db-0 beside an earlier copy, want none", n)
	}
	t.Logf("the old pod %s left the API unconfirmed; its replacement %s ran in containerd only after it stopped (%s)", old, replacement, watch)
}

// startAtMostOneNode starts a private containerd and a CRI node on it, with
// edits to the node's configuration, until the test ends; it returns the
// containerd and a CRI client of it.
func startAtMostOneNode(t *testing.T, name string, edits ...func(*agent.Config)) (*crienv.Env, runtimeapi.RuntimeServiceClient) {
	t.Helper()
	testenv.ControlPlane(t) // skips under -short
	testenv.Require(t, crienv.Available())
	env, err := crienv.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Stop)
	cfg := nodetest.CRIConfig(t, name, env)
	for _, edit := range edits {
		edit(&cfg)
	}
	nodetest.Run(t, cfg)
	conn, err := env.Conn()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return env, runtimeapi.NewRuntimeServiceClient(conn)
}

// replaceWithFrozenShim runs the StatefulSet db of one pod on node, freezes
// the containerd shim of db-0 once it runs, deletes db-0, and thaws the shim
// once held(old) is true (or after 3 minutes): by then containerd must not have
// run another db-0. It returns once the replacement runs, with both UIDs.
func replaceWithFrozenShim(t *testing.T, env *crienv.Env, rt runtimeapi.RuntimeServiceClient, watch *copies,
	ns, node string, held func(old types.UID) (bool, string)) (old, replacement types.UID) {
	t.Helper()
	spec := corev1.PodSpec{
		// Bound by the template: the package's control plane runs no scheduler.
		NodeName:                      node,
		TerminationGracePeriodSeconds: ptr.To[int64](1),
		Containers: []corev1.Container{{
			Name: "db", Image: env.Busybox, ImagePullPolicy: corev1.PullIfNotPresent,
			// Deaf to SIGTERM: only the runtime's SIGKILL stops it.
			Command: []string{"/bin/sh", "-c", "trap '' TERM; while :; do sleep 1; done"},
		}},
	}
	var thawed sync.WaitGroup
	quit := make(chan struct{}) // the test ended first
	t.Cleanup(func() { close(quit); thawed.Wait() })
	freeze := func(old types.UID) {
		shim, err := shimOf(rt, env, old)
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(shim, syscall.SIGSTOP); err != nil {
			t.Fatalf("freezing the shim of db-0 (pid %d): %v", shim, err)
		}
		var once sync.Once
		thaw := func() {
			once.Do(func() {
				if err := syscall.Kill(shim, syscall.SIGCONT); err != nil {
					t.Errorf("thawing the shim of db-0 (pid %d): %v", shim, err)
				}
			})
		}
		t.Cleanup(thaw) // whatever happens, nothing stays frozen
		frozen := time.Now()
		thawed.Add(1)
		go func() {
			// The test's goroutine waits in ReplaceStatefulSetPod meanwhile.
			defer thawed.Done()
			defer thaw()
			ok, why := poll(3*time.Minute, quit, func() (bool, string) { return held(old) })
			if !ok {
				t.Errorf("with the shim of db-0 frozen: %s", why)
				return
			}
			if uids := watch.seenUIDs(); len(uids) != 1 || uids[0] != string(old) {
				t.Errorf("with the old db-0 unable to stop, containerd ran db-0 of pods %v, want only %s", uids, old)
			}
			if uids, err := sandboxUIDs(rt, "db-0"); err != nil || len(uids) != 1 || uids[0] != string(old) {
				t.Errorf("with the old db-0 unable to stop, containerd has sandboxes of db-0 of pods %v (%v), want only %s", uids, err, old)
			}
			if n, err := runningContainers(rt, old); n != 1 {
				t.Errorf("with its shim frozen, the old db-0 has %d running containers (%v), want its one: the freeze did not hold its stop", n, err)
			}
			t.Logf("the shim of the old db-0 thawed %s after it was frozen", time.Since(frozen).Round(time.Millisecond))
		}()
	}
	return testenv.ReplaceStatefulSetPod(t, ns, node, spec, freeze)
}

// poll calls cond every 100 ms until it is true, timeout has passed or quit
// is closed, and returns its last answer: testenv.Eventually for a goroutine
// other than the test's, which may not end the test.
func poll(timeout time.Duration, quit <-chan struct{}, cond func() (bool, string)) (bool, string) {
	deadline := time.Now().Add(timeout)
	for {
		ok, why := cond()
		if ok || time.Now().After(deadline) {
			return ok, why
		}
		select {
		case <-quit:
			return false, why + " (the test ended)"
		case <-time.After(100 * time.Millisecond): // between two polls
		}
	}
}

// shimOf returns the pid of the containerd shim that runs the sandbox of pod
// uid in env's containerd (runc's shim v2 runs a sandbox's containers too):
// the process whose command line names the sandbox (-id) and env's socket.
func shimOf(rt runtimeapi.RuntimeServiceClient, env *crienv.Env, uid types.UID) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
		LabelSelector: map[string]string{"io.kubernetes.pod.uid": string(uid)},
		State:         &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
	}})
	if err != nil {
		return 0, err
	}
	if len(l.Items) != 1 {
		return 0, fmt.Errorf("%d ready sandboxes of pod %s, want 1", len(l.Items), uid)
	}
	sandbox := l.Items[0].Id
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range cmdlines {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		argv := strings.Split(string(b), "\x00")
		i := slices.Index(argv, "-id")
		if strings.HasPrefix(filepath.Base(argv[0]), "containerd-shim") && i >= 0 && i+1 < len(argv) &&
			argv[i+1] == sandbox && slices.Contains(argv, env.Socket) {
			return strconv.Atoi(filepath.Base(filepath.Dir(f)))
		}
	}
	return 0, errors.New("no containerd shim runs sandbox " + sandbox)
}

// sandboxUIDs are the pod UIDs of the sandboxes of pods named name.
func sandboxUIDs(rt runtimeapi.RuntimeServiceClient, name string) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
		LabelSelector: map[string]string{"io.kubernetes.pod.name": name}}})
	if err != nil {
		return nil, err
	}
	var uids []string
	for _, s := range l.Items {
		if !slices.Contains(uids, s.GetMetadata().GetUid()) {
			uids = append(uids, s.GetMetadata().GetUid())
		}
	}
	return uids, nil
}

// runningContainers counts the running containers of pod uid.
func runningContainers(rt runtimeapi.RuntimeServiceClient, uid types.UID) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		State:         &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
		LabelSelector: map[string]string{"io.kubernetes.pod.uid": string(uid)},
	}})
	if err != nil {
		return 0, err
	}
	return len(l.Containers), nil
}

// copies reads, every 50 ms, which pods of a name have a running container in
// containerd.
type copies struct {
	done    chan struct{}
	stopped chan struct{}
	ending  sync.Once

	mu      sync.Mutex
	order   []string        // pod UIDs in the order first seen running
	beside  map[string]bool // pods seen running beside one seen before
	polls   int
	both    int // polls that saw containers of two pods running
	failed  int // polls containerd did not answer
	lastErr error
}

// watchCopies starts reading containerd for running containers of pods named
// name, until stop or the end of the test.
func watchCopies(t *testing.T, rt runtimeapi.RuntimeServiceClient, name string) *copies {
	w := &copies{done: make(chan struct{}), stopped: make(chan struct{}), beside: map[string]bool{}}
	go func() {
		defer close(w.stopped)
		for {
			select {
			case <-w.done:
				return
			case <-time.After(50 * time.Millisecond):
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			l, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
				State:         &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
				LabelSelector: map[string]string{"io.kubernetes.pod.name": name},
			}})
			cancel()
			w.record(l, err)
		}
	}()
	t.Cleanup(w.end)
	return w
}

// end stops the watch and waits for its last poll.
func (w *copies) end() {
	w.ending.Do(func() { close(w.done) })
	<-w.stopped
}

func (w *copies) record(l *runtimeapi.ListContainersResponse, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.polls++
	if err != nil {
		w.failed++
		w.lastErr = err
		return
	}
	var running []string
	for _, c := range l.Containers {
		if uid := c.Labels["io.kubernetes.pod.uid"]; !slices.Contains(running, uid) {
			running = append(running, uid)
		}
	}
	for _, uid := range running {
		if !slices.Contains(w.order, uid) {
			w.order = append(w.order, uid)
		}
	}
	if len(running) < 2 {
		return
	}
	w.both++
	first := slices.IndexFunc(w.order, func(uid string) bool { return slices.Contains(running, uid) })
	for _, uid := range running {
		if uid != w.order[first] {
			w.beside[uid] = true
		}
	}
}

// stop waits until the watch has seen pod uid running (the replacement: the
// watch then covered the whole replacement), and stops it.
func (w *copies) stop(t *testing.T, uid types.UID) {
	t.Helper()
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		return slices.Contains(w.seenUIDs(), string(uid)), fmt.Sprintf("containerd's running db-0 containers seen of pods %v, want %s's (%s)", w.seenUIDs(), uid, w)
	})
	w.end()
}

// seenUIDs are the pods seen running, in the order first seen.
func (w *copies) seenUIDs() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.order)
}

// overlapping is how many pods were seen running beside an earlier one.
func (w *copies) overlapping() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.beside)
}

func (w *copies) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return fmt.Sprintf("%d polls of containerd, %d with two pods running, %d unanswered (last: %v)", w.polls, w.both, w.failed, w.lastErr)
}
