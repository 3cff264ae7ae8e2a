package agent_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/internal/process/agent"
	"github.com/vkubelet/vkubelet/pod"
	"github.com/vkubelet/vkubelet/providers/mock"
)

// A StatefulSet's pod, deleted on a node whose provider stops it well after
// its grace period, is replaced only once the provider has stopped it: the
// provider never runs two copies of it. The node says why the old pod stays
// Terminating meanwhile.
func TestAStatefulSetsPodIsNeverRunTwice(t *testing.T) {
	const node = "vk-at-most-one"
	_, prov := startNode(t, node, mock.Config{StopOverrun: mock.Duration{Duration: 8 * time.Second}})
	c := testenv.Client(t)
	ns := testenv.Namespace(t)

	old, replacement := replaceStatefulSetPod(t, c, ns, node)
	if n := prov.Overlaps(); n != 0 {
		t.Fatalf("the provider ran %d pods beside an earlier copy of the same name, want none", n)
	}
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		reasons := eventReasons(c, ns, old)
		for _, r := range reasons {
			if r == pod.ReasonStopNotConfirmed {
				return true, ""
			}
		}
		return false, fmt.Sprintf("events of the old pod: %v, want a %s", reasons, pod.ReasonStopNotConfirmed)
	})
	t.Logf("replacement %s created after the old pod %s stopped in the provider", replacement, old)
}

// --remove-unconfirmed-after gives the promise up, as documented: the old pod
// leaves the API unconfirmed and its replacement runs beside it. (This is also
// what shows that the test above can see two copies.)
func TestRemoveUnconfirmedAfterLetsTwoCopiesRun(t *testing.T) {
	const node = "vk-remove-unconfirmed"
	// The old copy stops two minutes after its deletion: its replacement is
	// created long before on any machine.
	_, prov := startNode(t, node, mock.Config{StopOverrun: mock.Duration{Duration: 2 * time.Minute}},
		func(cfg *agent.Config) { cfg.RemoveUnconfirmedAfter = time.Second })
	c := testenv.Client(t)
	ns := testenv.Namespace(t)

	replaceStatefulSetPod(t, c, ns, node)
	if n := prov.Overlaps(); n != 1 {
		t.Fatalf("the provider ran %d pods beside an earlier copy, want the one replacement", n)
	}
}

// replaceStatefulSetPod runs a StatefulSet of one pod on node, deletes the
// pod, and waits for its replacement to run; it returns both UIDs.
func replaceStatefulSetPod(t *testing.T, c kubernetes.Interface, ns, node string) (old, replacement types.UID) {
	t.Helper()
	ctx := context.Background()
	labels := map[string]string{"app": "db"}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Spec: appsv1.StatefulSetSpec{
			Replicas:    ptr.To[int32](1),
			ServiceName: "db",
			Selector:    &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers:                    []corev1.Container{{Name: "db", Image: "postgres"}},
					Tolerations:                   tolerateVirtualNode(),
					NodeSelector:                  map[string]string{"kubernetes.io/hostname": node},
					TerminationGracePeriodSeconds: ptr.To[int64](1),
				},
			},
		},
	}
	if _, err := c.AppsV1().StatefulSets(ns).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	runningDB := func(not types.UID) (types.UID, string) {
		p, err := c.CoreV1().Pods(ns).Get(ctx, "db-0", metav1.GetOptions{})
		if err != nil {
			return "", err.Error()
		}
		if p.UID == not || p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
			return "", fmt.Sprintf("db-0 %s is %s (deleting: %v)", p.UID, p.Status.Phase, p.DeletionTimestamp != nil)
		}
		return p.UID, ""
	}
	testenv.Eventually(t, 2*time.Minute, func() (bool, string) {
		uid, why := runningDB("")
		old = uid
		return uid != "", why
	})
	if err := c.CoreV1().Pods(ns).Delete(ctx, "db-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 2*time.Minute, func() (bool, string) {
		uid, why := runningDB(old)
		replacement = uid
		return uid != "", why
	})
	return old, replacement
}

// eventReasons are the reasons of the Events about the object with uid.
func eventReasons(c kubernetes.Interface, ns string, uid types.UID) []string {
	l, err := c.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(uid)})
	if err != nil {
		return []string{err.Error()}
	}
	var reasons []string
	for _, e := range l.Items {
		reasons = append(reasons, e.Reason)
	}
	return reasons
}
