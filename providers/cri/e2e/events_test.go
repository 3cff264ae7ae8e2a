package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vkubelet/vkubelet/internal/lab/testenv"
)

// Each container the node starts has the kubelet's Events on its field path:
// its image found ("Pulled"), "Created" and "Started", and "Started" again at
// each restart. Tools and Kubernetes' own tests wait for them.
func TestAStartedContainerHasTheKubeletsEvents(t *testing.T) {
	const node = "cri-events"
	env := startNode(t, node)
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx := context.Background()

	pod := busybox("evented", node, env.Busybox, "sleep 1; exit 1")
	pod.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
	pod.Spec.InitContainers = []corev1.Container{{
		Name: "setup", Image: env.Busybox, ImagePullPolicy: corev1.PullIfNotPresent,
		Command: []string{"true"},
	}}
	if _, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The first container pulls the image from the test's registry, the
	// others find it.
	pulled := []string{
		fmt.Sprintf("Container image %q already present on machine", env.Busybox),
		fmt.Sprintf("Successfully pulled image %q in ", env.Busybox),
	}
	// count sums the Normal Events of reason on fieldPath whose message starts
	// with one of messages: the recorder folds repeated ones into one Event
	// with a count.
	count := func(events []corev1.Event, fieldPath, reason string, messages ...string) int32 {
		var n int32
		for _, e := range events {
			if e.InvolvedObject.FieldPath != fieldPath || e.Reason != reason || e.Type != corev1.EventTypeNormal {
				continue
			}
			for _, m := range messages {
				if strings.HasPrefix(e.Message, m) {
					n += max(e.Count, 1)
					break
				}
			}
		}
		return n
	}
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		list, err := c.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=evented"})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int32{}
		for _, want := range []struct {
			path, reason string
			messages     []string
		}{
			{"spec.initContainers{setup}", "Pulled", pulled},
			{"spec.initContainers{setup}", "Created", []string{"Container created"}},
			{"spec.initContainers{setup}", "Started", []string{"Container started"}},
			{"spec.containers{main}", "Pulled", pulled},
			{"spec.containers{main}", "Created", []string{"Container created"}},
			{"spec.containers{main}", "Started", []string{"Container started"}},
		} {
			got[want.path+" "+want.reason] = count(list.Items, want.path, want.reason, want.messages...)
		}
		for k, n := range got {
			if n < 1 || (k == "spec.containers{main} Started" && n < 2) || (k == "spec.initContainers{setup} Started" && n != 1) {
				return false, fmt.Sprintf("Events by container and reason %v (main started twice, by its restart; setup once), all: %+v", got, list.Items)
			}
		}
		return true, ""
	})
}
