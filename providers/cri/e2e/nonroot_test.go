package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/lab/testenv"
)

// A container that must run as a non-root user is not started as root, as on a
// kubelet: with an image that runs as root (busybox names no user) or an
// explicit runAsUser 0 it waits in CreateContainerConfigError with the kubelet's
// message and a Warning Event "Failed"; with a non-root runAsUser it runs.
func TestRunAsNonRootRefusesRoot(t *testing.T) {
	const node = "cri-nonroot"
	env := startNode(t, node)
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx := context.Background()

	cases := []struct {
		name string
		user *int64
		want string // the waiting message; "" runs
	}{
		{"image-root", nil, `container has runAsNonRoot and image will run as root (pod: "image-root_%s(%s)", container: main)`},
		{"explicit-root", ptr.To(int64(0)), `container's runAsUser breaks non-root policy (pod: "explicit-root_%s(%s)", container: main)`},
		{"non-root", ptr.To(int64(1000)), ""},
	}
	uids := map[string]string{}
	for _, tc := range cases {
		pod := busybox(tc.name, node, env.Busybox, sleepScript)
		pod.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: tc.user}
		created, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		uids[tc.name] = string(created.UID)
	}
	for _, tc := range cases {
		if tc.want == "" {
			testenv.WaitPod(t, ns, tc.name, "Running and Ready", runningAndReady)
			continue
		}
		want := fmt.Sprintf(tc.want, ns, uids[tc.name])
		got := testenv.WaitPod(t, ns, tc.name, "refused", func(p *corev1.Pod) bool {
			return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Waiting != nil &&
				p.Status.ContainerStatuses[0].State.Waiting.Reason == "CreateContainerConfigError"
		})
		if w := got.Status.ContainerStatuses[0].State.Waiting; w.Message != want {
			t.Errorf("%s: message %q, want %q", tc.name, w.Message, want)
		}
		if got.Status.Phase != corev1.PodPending {
			t.Errorf("%s: phase %s", tc.name, got.Status.Phase)
		}
		// What Kubernetes' own test waits for: the kubelet's Warning Event "Failed".
		testenv.Eventually(t, 10*time.Second, func() (bool, string) {
			events, err := c.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + tc.name + ",reason=Failed"})
			if err != nil {
				t.Fatal(err)
			}
			return len(events.Items) > 0 && events.Items[0].Message == "Error: "+want, fmt.Sprintf("%s: Failed Events %+v", tc.name, events.Items)
		})
	}
}
