package agent_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/internal/process/agent"
	"github.com/vkubelet/vkubelet/pod"
	"github.com/vkubelet/vkubelet/providers/mock"
)

// dbSpec is the StatefulSet pod of the at-most-one tests: a grace period of a
// second, which the mock's stopOverrun outlasts.
var dbSpec = corev1.PodSpec{
	Containers:                    []corev1.Container{{Name: "db", Image: "postgres"}},
	TerminationGracePeriodSeconds: ptr.To[int64](1),
}

// A StatefulSet's pod, deleted on a node whose provider stops it well after
// its grace period, is replaced only once the provider has stopped it: the
// provider never runs two copies of it. The node says why the old pod stays
// Terminating meanwhile.
func TestAStatefulSetsPodIsNeverRunTwice(t *testing.T) {
	const node = "vk-at-most-one"
	_, prov := startNode(t, node, mock.Config{StopOverrun: mock.Duration{Duration: 8 * time.Second}})
	ns := testenv.Namespace(t)

	old, replacement := testenv.ReplaceStatefulSetPod(t, ns, node, dbSpec)
	if n := prov.Overlaps(); n != 0 {
		t.Fatalf("the provider ran %d pods beside an earlier copy of the same name, want none", n)
	}
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		reasons := testenv.EventReasons(t, ns, old)
		return slices.Contains(reasons, pod.ReasonStopNotConfirmed),
			fmt.Sprintf("events of the old pod: %v, want a %s", reasons, pod.ReasonStopNotConfirmed)
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
	testenv.ReplaceStatefulSetPod(t, testenv.Namespace(t), node, dbSpec)
	if n := prov.Overlaps(); n != 1 {
		t.Fatalf("the provider ran %d pods beside an earlier copy, want the one replacement", n)
	}
}
