package pod

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/wire/podwire"
)

func TestConditionsAProviderLeftOutAreWorkedOutFromItsContainers(t *testing.T) {
	of := podContainers{app: []string{"app", "log"}, init: []string{"migrate", "proxy"}, sidecars: map[string]bool{"proxy": true}}
	ran := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: t0}}
	initDone := []corev1.ContainerStatus{{Name: "migrate", State: ran}, {Name: "proxy", State: running, Started: ptr.To(true), Ready: true}}
	appReady := []corev1.ContainerStatus{{Name: "app", State: running, Ready: true}, {Name: "log", State: running, Ready: true}}
	type want struct {
		status  corev1.ConditionStatus
		reason  string
		message string // contained
	}
	cases := []struct {
		name               string
		status             corev1.PodStatus
		initialized, ready want
	}{
		{name: "running and ready",
			status:      corev1.PodStatus{Phase: corev1.PodRunning, InitContainerStatuses: initDone, ContainerStatuses: appReady},
			initialized: want{status: corev1.ConditionTrue}, ready: want{status: corev1.ConditionTrue}},
		{name: "one app container not ready",
			status: corev1.PodStatus{Phase: corev1.PodRunning, InitContainerStatuses: initDone,
				ContainerStatuses: []corev1.ContainerStatus{appReady[0], {Name: "log", State: running}}},
			initialized: want{status: corev1.ConditionTrue}, ready: want{corev1.ConditionFalse, reasonContainersNotReady, "log"}},
		{name: "an app container not reported",
			status:      corev1.PodStatus{Phase: corev1.PodRunning, InitContainerStatuses: initDone, ContainerStatuses: appReady[:1]},
			initialized: want{status: corev1.ConditionTrue}, ready: want{corev1.ConditionFalse, reasonContainersNotReady, "log"}},
		{name: "the sidecar not ready",
			status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: appReady, InitContainerStatuses: []corev1.ContainerStatus{
				initDone[0], {Name: "proxy", State: running, Started: ptr.To(true)}}},
			initialized: want{status: corev1.ConditionTrue}, ready: want{corev1.ConditionFalse, reasonContainersNotReady, "proxy"}},
		{name: "still initialising",
			status: corev1.PodStatus{Phase: corev1.PodPending, InitContainerStatuses: []corev1.ContainerStatus{{Name: "migrate", State: running}},
				ContainerStatuses: []corev1.ContainerStatus{{Name: "app", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}}}},
			initialized: want{corev1.ConditionFalse, reasonContainersNotInitialized, "migrate, proxy"},
			ready:       want{corev1.ConditionFalse, reasonContainersNotReady, "app, log"}},
		{name: "an init container failed",
			status: corev1.PodStatus{Phase: corev1.PodPending, InitContainerStatuses: []corev1.ContainerStatus{
				{Name: "migrate", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1}}}}},
			initialized: want{corev1.ConditionFalse, reasonContainersNotInitialized, "migrate"},
			ready:       want{corev1.ConditionFalse, reasonContainersNotReady, "app"}},
		{name: "finished",
			status:      corev1.PodStatus{Phase: corev1.PodSucceeded, InitContainerStatuses: initDone, ContainerStatuses: appReady},
			initialized: want{status: corev1.ConditionTrue}, ready: want{corev1.ConditionFalse, reasonPodCompleted, ""}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if !lacksDerivedConditions(&tc.status) {
				t.Fatal("a status without conditions does not lack them")
			}
			got := withDerivedConditions(&tc.status, of, t1)
			if len(tc.status.Conditions) != 0 {
				t.Fatal("the provider's status was changed")
			}
			check := func(ct corev1.PodConditionType, w want) {
				c := findCondition(got.Conditions, ct)
				if c == nil || c.Status != w.status || c.Reason != w.reason || !strings.Contains(c.Message, w.message) || !c.LastTransitionTime.Equal(&t1) {
					t.Errorf("%s = %+v, want %s (%q, message with %q)", ct, c, w.status, w.reason, w.message)
				}
			}
			check(corev1.PodInitialized, tc.initialized)
			check(corev1.ContainersReady, tc.ready)
			check(corev1.PodReady, tc.ready)
			if lacksDerivedConditions(got) {
				t.Error("still lacking after the fill-in")
			}
		})
	}
}

// What the provider says stands; only what it left out is filled in.
func TestAProvidersOwnConditionsStand(t *testing.T) {
	s := &corev1.PodStatus{Phase: corev1.PodRunning,
		ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Ready: true}},
		Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "Warming"}}}
	got := withDerivedConditions(s, podContainers{app: []string{"app"}}, t1)
	if r := findCondition(got.Conditions, corev1.PodReady); r.Status != corev1.ConditionFalse || r.Reason != "Warming" {
		t.Errorf("Ready = %+v, want the provider's", r)
	}
	if cr := findCondition(got.Conditions, corev1.ContainersReady); cr == nil || cr.Status != corev1.ConditionTrue {
		t.Errorf("ContainersReady = %+v, want True from the container", cr)
	}
	if n := len(got.Conditions); n != 3 {
		t.Errorf("%d conditions, want the provider's one and two filled in", n)
	}
}

func TestTheCachedPodNamesItsContainers(t *testing.T) {
	p := &corev1.Pod{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "migrate", Image: "i"}, {Name: "proxy", Image: "i", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)}},
		Containers:     []corev1.Container{{Name: "app", Image: "i"}, {Name: "log", Image: "i"}}}}
	p.Namespace, p.Name, p.UID = "ns", "a", "u1"
	c, err := podwire.Compact(p)
	if err != nil {
		t.Fatal(err)
	}
	of, err := containersOf(c)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(of.app, ",") != "app,log" || strings.Join(of.init, ",") != "migrate,proxy" || len(of.sidecars) != 1 || !of.sidecars["proxy"] {
		t.Errorf("containers = %+v", of)
	}
}
