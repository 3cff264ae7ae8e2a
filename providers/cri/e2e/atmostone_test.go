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
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/lab/crienv"
	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/internal/process/agent"
	"github.com/vkubelet/vkubelet/pod"
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
	watch.Stop(t, replacement)
	if n := watch.Overlapping(); n != 0 {
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
	watch.Stop(t, replacement)
	if n := watch.Overlapping(); n != 0 {
		t.Fatalf("containerd ran %d pods named db-0 beside an earlier copy, want none", n)
	}
	t.Logf("the old pod %s left the API unconfirmed; its replacement %s ran in containerd only after it stopped (%s)", old, replacement, watch)
}

// startAtMostOneNode starts a private containerd and a CRI node on it, with
// edits to the node's configuration, until the test ends; it returns the
// containerd and a CRI client of it.
func startAtMostOneNode(t *testing.T, name string, edits ...func(*agent.Config)) (*crienv.Env, runtimeapi.RuntimeServiceClient) {
	t.Helper()
	env := startNode(t, name, edits...)
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
func replaceWithFrozenShim(t *testing.T, env *crienv.Env, rt runtimeapi.RuntimeServiceClient, watch *testenv.Copies,
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
	freeze := func(old types.UID) {
		shim, err := shimOf(rt, env, old)
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(shim, syscall.SIGSTOP); err != nil {
			t.Fatalf("freezing the shim of db-0 (pid %d): %v", shim, err)
		}
		frozen := time.Now()
		testenv.ReleaseWhen(t, 3*time.Minute, func() (bool, string) { return held(old) }, func(held bool) {
			if held {
				if uids := watch.Seen(); !slices.Equal(uids, []types.UID{old}) {
					t.Errorf("with the old db-0 unable to stop, containerd ran db-0 of pods %v, want only %s", uids, old)
				}
				if uids, err := sandboxUIDs(rt, "db-0"); err != nil || !slices.Equal(uids, []types.UID{old}) {
					t.Errorf("with the old db-0 unable to stop, containerd has sandboxes of db-0 of pods %v (%v), want only %s", uids, err, old)
				}
				if n, err := runningContainers(rt, old); n != 1 {
					t.Errorf("with its shim frozen, the old db-0 has %d running containers (%v), want its one: the freeze did not hold its stop", n, err)
				}
				t.Logf("the shim of the old db-0 thawed %s after it was frozen", time.Since(frozen).Round(time.Millisecond))
			}
			// Whatever happened, nothing stays frozen.
			if err := syscall.Kill(shim, syscall.SIGCONT); err != nil {
				t.Errorf("thawing the shim of db-0 (pid %d): %v", shim, err)
			}
		})
	}
	return testenv.ReplaceStatefulSetPod(t, ns, node, spec, freeze)
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
func sandboxUIDs(rt runtimeapi.RuntimeServiceClient, name string) ([]types.UID, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
		LabelSelector: map[string]string{"io.kubernetes.pod.name": name}}})
	if err != nil {
		return nil, err
	}
	var uids []types.UID
	for _, s := range l.Items {
		if uid := types.UID(s.GetMetadata().GetUid()); !slices.Contains(uids, uid) {
			uids = append(uids, uid)
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

// watchCopies watches, in containerd, which pods named name have a running
// container (testenv.WatchCopies).
func watchCopies(t *testing.T, rt runtimeapi.RuntimeServiceClient, name string) *testenv.Copies {
	return testenv.WatchCopies(t, func() ([]types.UID, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		l, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
			State:         &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
			LabelSelector: map[string]string{"io.kubernetes.pod.name": name},
		}})
		if err != nil {
			return nil, err
		}
		var uids []types.UID
		for _, c := range l.Containers {
			uids = append(uids, types.UID(c.Labels["io.kubernetes.pod.uid"]))
		}
		return uids, nil
	})
}
