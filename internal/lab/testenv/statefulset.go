package testenv

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// ReplaceStatefulSetPod runs a StatefulSet "db" of one pod with spec on node
// (tolerating the virtual node's taint), deletes the pod db-0, and waits for
// the StatefulSet's replacement to run; it returns both pods' UIDs. It needs
// the control plane's controller-manager. Tests of the "at most one copy"
// promise read, in the provider, whether the two ever ran at once. Each of
// beforeDelete is called with the first pod's UID once it runs, before it is
// deleted (to make its stop slow, say).
func ReplaceStatefulSetPod(t testing.TB, ns, node string, spec corev1.PodSpec, beforeDelete ...func(old types.UID)) (old, replacement types.UID) {
	t.Helper()
	c := Client(t)
	ctx := context.Background()
	labels := map[string]string{"app": "db"}
	spec.NodeSelector = map[string]string{corev1.LabelHostname: node}
	spec.Tolerations = append(spec.Tolerations, corev1.Toleration{
		Key: "virtual-kubelet.io/provider", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Spec: appsv1.StatefulSetSpec{
			Replicas:    ptr.To[int32](1),
			ServiceName: "db",
			Selector:    &metav1.LabelSelector{MatchLabels: labels},
			Template:    corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec},
		},
	}
	if _, err := c.AppsV1().StatefulSets(ns).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	running := func(not types.UID) (types.UID, string) {
		p, err := c.CoreV1().Pods(ns).Get(ctx, "db-0", metav1.GetOptions{})
		if err != nil {
			return "", err.Error()
		}
		if p.UID == not || p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
			return "", fmt.Sprintf("db-0 %s is %s (deleting: %v)", p.UID, p.Status.Phase, p.DeletionTimestamp != nil)
		}
		return p.UID, ""
	}
	Eventually(t, 3*time.Minute, func() (bool, string) {
		uid, why := running("")
		old = uid
		return uid != "", why
	})
	for _, f := range beforeDelete {
		f(old)
	}
	if err := c.CoreV1().Pods(ns).Delete(ctx, "db-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	Eventually(t, 3*time.Minute, func() (bool, string) {
		uid, why := running(old)
		replacement = uid
		return uid != "", why
	})
	return old, replacement
}

// EventReasons are the reasons of the Events in ns about the object with uid.
func EventReasons(t testing.TB, ns string, uid types.UID) []string {
	t.Helper()
	l, err := Client(t).CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(uid)})
	if err != nil {
		return []string{err.Error()}
	}
	var reasons []string
	for _, e := range l.Items {
		reasons = append(reasons, e.Reason)
	}
	return reasons
}
