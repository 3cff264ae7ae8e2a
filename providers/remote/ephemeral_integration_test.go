package remote_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/lab/crienv"
	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/providers/cri"
)

// `kubectl debug` on a node whose provider is at the other end of the protocol:
// the CRI provider, with real containers in a private containerd, served as
// `vkubelet provider serve --provider cri` serves it. An ephemeral container added
// through the API's ephemeralcontainers subresource runs in the pod with the
// environment the agent resolved for it (a ConfigMap's value, which the provider
// cannot look up itself), sent in PodRequest.env; its status comes back running,
// then terminated with its exit code; its logs are served by name; the pod stays
// Running throughout.
func TestAnEphemeralContainerRunsInARemoteProvider(t *testing.T) {
	testenv.ControlPlane(t) // skips under -short
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx := context.Background()
	const node = "remote-cri-debug"

	testenv.Require(t, crienv.Available())
	env, err := crienv.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Stop)
	p, err := cri.New(ctx, cri.Config{RuntimeEndpoint: env.Socket, RootDir: t.TempDir(),
		BackoffBase: cri.Duration{Duration: time.Second}, SyncInterval: cri.Duration{Duration: 200 * time.Millisecond}}, node)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	endpoint := serve(t, p, "cri")

	runRemoteNode(t, node, endpoint)

	if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "settings"}, Data: map[string]string{"who": "a debugger over the protocol"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: ptr.To(int64(2)),
			Containers: []corev1.Container{{Name: "main", Image: env.Busybox, ImagePullPolicy: corev1.PullIfNotPresent,
				Command: []string{"/bin/sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1 & wait $!; done"}}}},
	}
	if _, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod = testenv.WaitPod(t, ns, "web", "Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })

	// The debugger runs until the test says it may end, so that its running state
	// is seen before its terminated one.
	testenv.RunEphemeralContainer(t, pod, corev1.EphemeralContainer{
		EphemeralContainerCommon: corev1.EphemeralContainerCommon{
			Name: "debugger", Image: env.Busybox, ImagePullPolicy: corev1.PullIfNotPresent,
			TerminationMessagePolicy: corev1.TerminationMessageReadFile,
			Env: []corev1.EnvVar{{Name: "WHO", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}, Key: "who"}}}},
			Command: []string{"/bin/sh", "-c", `echo "who: $WHO"; while [ ! -e /tmp/done ]; do sleep 1; done; echo bye; exit 3`},
		},
		TargetContainerName: "main",
	})
	if out, err := testenv.Exec(t, ns, "web", "debugger", "touch", "/tmp/done"); err != nil {
		t.Fatalf("exec in the debugger: %q, %v", out, err)
	}
	got := testenv.WaitPod(t, ns, "web", "the debugger terminated", func(p *corev1.Pod) bool {
		s := testenv.EphemeralContainerStatus(p, "debugger")
		return s != nil && s.State.Terminated != nil
	})
	if term := testenv.EphemeralContainerStatus(got, "debugger").State.Terminated; term.ExitCode != 3 || term.Reason != "Error" {
		t.Errorf("the debugger terminated %+v, want exit code 3 (Error)", term)
	}
	if got.Status.Phase != corev1.PodRunning || got.Status.ContainerStatuses[0].State.Running == nil {
		t.Errorf("the pod after the debugger's end: %s, main %+v", got.Status.Phase, got.Status.ContainerStatuses[0].State)
	}
	const want = "who: a debugger over the protocol\nbye\n"
	logs, err := c.CoreV1().Pods(ns).GetLogs("web", &corev1.PodLogOptions{Container: "debugger"}).DoRaw(ctx)
	if err != nil || string(logs) != want {
		t.Errorf("kubectl logs web -c debugger = %q, %v; want %q", logs, err, want)
	}
}
