package pod_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/pod"
)

// A pod for another operating system than the node's is rejected as the kubelet
// rejects it, and never reaches the provider: Failed with reason
// PodOSNotSupported (spec.os) or PodOSSelectorNodeLabelDoesNotMatch (its
// kubernetes.io/os label), the kubelet's message, a Warning Event. A pod for the
// node's runs.
func TestAPodForAnotherOSIsRejected(t *testing.T) {
	prov := newMock(t, "")
	c, node := startController(t, prov)
	ns := testenv.Namespace(t)
	windows := createPod(t, c, ns, node, appPod("windows", func(s *corev1.PodSpec) { s.OS = &corev1.PodOS{Name: corev1.Windows} }))
	labelled := appPod("labelled", nil)
	labelled.Labels = map[string]string{corev1.LabelOSStable: "windows"}
	labelled = createPod(t, c, ns, node, labelled)
	createPod(t, c, ns, node, appPod("linux", func(s *corev1.PodSpec) { s.OS = &corev1.PodOS{Name: corev1.Linux} }))

	cases := []struct {
		name, reason, message string
	}{
		{"windows", pod.ReasonPodOSNotSupported, "Pod was rejected: Failed to admit pod as the OS field doesn't match node OS"},
		{"labelled", pod.ReasonPodOSSelectorNodeLabelDoesNotMatch, "Pod was rejected: Failed to admit pod as the `kubernetes.io/os` label doesn't match node label"},
	}
	for _, tc := range cases {
		got := testenv.WaitPod(t, ns, tc.name, "Failed", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
		if got.Status.Reason != tc.reason || got.Status.Message != tc.message {
			t.Errorf("%s: reason %q, message %q; want %q, %q", tc.name, got.Status.Reason, got.Status.Message, tc.reason, tc.message)
		}
		testenv.Eventually(t, 10*time.Second, func() (bool, string) {
			events, err := c.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{
				FieldSelector: "involvedObject.name=" + tc.name + ",reason=" + tc.reason})
			if err != nil {
				t.Fatal(err)
			}
			return len(events.Items) == 1 && events.Items[0].Type == corev1.EventTypeWarning,
				fmt.Sprintf("%s: %d %s Events, want one Warning", tc.name, len(events.Items), tc.reason)
		})
	}
	waitRunning(t, c, ns, "linux")
	time.Sleep(time.Second) // a rejected pod would have been created by now
	for _, p := range []*corev1.Pod{windows, labelled} {
		if n := prov.CreateCount(p.UID); n != 0 {
			t.Errorf("%s reached the provider %d times", p.Name, n)
		}
		if got := getPod(t, c, ns, p.Name); got.Status.Phase != corev1.PodFailed {
			t.Errorf("%s went on to %s", p.Name, got.Status.Phase)
		}
	}
}
