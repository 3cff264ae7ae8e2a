package cri

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/provider"
)

func debugPod() *corev1.Pod {
	return &corev1.Pod{Spec: corev1.PodSpec{
		RestartPolicy: corev1.RestartPolicyAlways,
		Containers:    []corev1.Container{{Name: "main"}},
		EphemeralContainers: []corev1.EphemeralContainer{
			{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debugger", Image: "busybox"}, TargetContainerName: "main"},
		},
	}}
}

func runtimeStatus(id string, state runtimeapi.ContainerState, exitCode int32) *runtimeapi.ContainerStatus {
	return &runtimeapi.ContainerStatus{Id: id, State: state, ExitCode: exitCode, Metadata: &runtimeapi.ContainerMetadata{}}
}

// An ephemeral container has a status of its own, never started nor ready, and
// leaves the pod's phase and readiness to the other containers.
func TestEphemeralStatusLeavesPhaseAndReadinessAlone(t *testing.T) {
	running := runtimeStatus("m", runtimeapi.ContainerState_CONTAINER_RUNNING, 0)
	for _, tc := range []struct {
		name     string
		debugger *ctrState
		want     func(corev1.ContainerState) bool
	}{
		{"not created yet", nil, func(s corev1.ContainerState) bool { return s.Waiting != nil && s.Waiting.Reason == "ContainerCreating" }},
		{"pull failing", &ctrState{waitReason: "ErrImagePull", waitMessage: "no such image"}, func(s corev1.ContainerState) bool {
			return s.Waiting != nil && s.Waiting.Reason == "ErrImagePull"
		}},
		{"running", &ctrState{cur: runtimeStatus("d", runtimeapi.ContainerState_CONTAINER_RUNNING, 0)}, func(s corev1.ContainerState) bool { return s.Running != nil }},
		{"exited 3", &ctrState{cur: runtimeStatus("d", runtimeapi.ContainerState_CONTAINER_EXITED, 3)}, func(s corev1.ContainerState) bool {
			return s.Terminated != nil && s.Terminated.ExitCode == 3 && s.Terminated.Reason == "Error"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &podRecord{sandboxReady: true, initDone: true, status: &corev1.PodStatus{},
				ctrs: map[string]*ctrState{"main": {cur: running, probes: probeStates{started: true, ready: true}}}}
			if tc.debugger != nil {
				rec.ctrs["debugger"] = tc.debugger
			}
			s := computeStatus(rec, debugPod(), "10.0.0.1")
			if s.Phase != corev1.PodRunning || condition(s, corev1.PodReady) != corev1.ConditionTrue {
				t.Errorf("phase %s, Ready %s; want Running and Ready whatever the ephemeral container does", s.Phase, condition(s, corev1.PodReady))
			}
			if len(s.EphemeralContainerStatuses) != 1 {
				t.Fatalf("ephemeral statuses = %+v", s.EphemeralContainerStatuses)
			}
			cs := s.EphemeralContainerStatuses[0]
			if cs.Name != "debugger" || cs.Image != "busybox" || cs.Started != nil || cs.Ready || cs.RestartCount != 0 || !tc.want(cs.State) {
				t.Errorf("status = %+v", cs)
			}
		})
	}
	// A pod without ephemeral containers has no such statuses: the API's stay.
	pod := debugPod()
	pod.Spec.EphemeralContainers = nil
	rec := &podRecord{sandboxReady: true, status: &corev1.PodStatus{}, ctrs: map[string]*ctrState{"main": {cur: running}}}
	if s := computeStatus(rec, pod, ""); s.EphemeralContainerStatuses != nil {
		t.Errorf("ephemeral statuses of a pod without any = %+v", s.EphemeralContainerStatuses)
	}
}

// targetContainerName puts the ephemeral container into the process namespace of
// the target's running instance, as the kubelet does; a target that does not run
// keeps it from starting.
func TestEphemeralContainerTargetsTheProcessNamespace(t *testing.T) {
	for _, tc := range []struct {
		name      string
		target    string
		main      *runtimeapi.ContainerStatus
		podPid    runtimeapi.NamespaceMode
		wantPid   runtimeapi.NamespaceMode
		wantID    string
		wantError bool
	}{
		{"no target", "", nil, runtimeapi.NamespaceMode_CONTAINER, runtimeapi.NamespaceMode_CONTAINER, "", false},
		{"target running", "main", runtimeStatus("m1", runtimeapi.ContainerState_CONTAINER_RUNNING, 0), runtimeapi.NamespaceMode_CONTAINER, runtimeapi.NamespaceMode_TARGET, "m1", false},
		{"target exited", "main", runtimeStatus("m1", runtimeapi.ContainerState_CONTAINER_EXITED, 0), runtimeapi.NamespaceMode_CONTAINER, 0, "", true},
		{"target never ran", "main", nil, runtimeapi.NamespaceMode_CONTAINER, 0, "", true},
		{"shareProcessNamespace", "main", runtimeStatus("m1", runtimeapi.ContainerState_CONTAINER_RUNNING, 0), runtimeapi.NamespaceMode_POD, runtimeapi.NamespaceMode_POD, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := debugPod()
			pod.Spec.EphemeralContainers[0].TargetContainerName = tc.target
			rec := &podRecord{ctrs: map[string]*ctrState{}}
			if tc.main != nil {
				rec.ctrs["main"] = &ctrState{cur: tc.main}
			}
			id, err := targetID(rec, pod, "debugger")
			if (err != nil) != tc.wantError {
				t.Fatalf("targetID = %q, %v; want an error: %v", id, err, tc.wantError)
			}
			if err != nil {
				if !strings.Contains(err.Error(), "unable to find target container main") {
					t.Errorf("error = %v", err)
				}
				return
			}
			ns := &runtimeapi.NamespaceOption{Pid: tc.podPid}
			withTarget(ns, id)
			if ns.Pid != tc.wantPid || ns.TargetId != tc.wantID {
				t.Errorf("pid namespace %s target %q, want %s %q", ns.Pid, ns.TargetId, tc.wantPid, tc.wantID)
			}
		})
	}
	if id, err := targetID(&podRecord{}, debugPod(), "main"); id != "" || err != nil {
		t.Errorf("targetID of an app container = %q, %v; want none", id, err)
	}
}

// When the sandbox dies, what ran of an ephemeral container stays its final state:
// it ended with the sandbox if it still ran, and it does not run again.
func TestEphemeralContainersEndWithTheirSandbox(t *testing.T) {
	pod := debugPod()
	pod.Spec.EphemeralContainers = append(pod.Spec.EphemeralContainers,
		corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "done"}},
		corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "never-created"}})
	now := time.Unix(1000, 0)
	running := runtimeStatus("d", runtimeapi.ContainerState_CONTAINER_RUNNING, 0)
	rec := &podRecord{ctrs: map[string]*ctrState{
		"main":     {cur: runtimeStatus("m", runtimeapi.ContainerState_CONTAINER_RUNNING, 0)},
		"debugger": {cur: running},
		"done":     {cur: runtimeStatus("e", runtimeapi.ContainerState_CONTAINER_EXITED, 0)},
	}}
	endEphemeral(rec, pod, now)
	if _, ok := rec.ephemeralEnded["main"]; ok {
		t.Error("an app container is kept as ended: it would never start again")
	}
	if _, ok := rec.ephemeralEnded["never-created"]; ok {
		t.Error("an ephemeral container that never ran is kept as ended: it would never start")
	}
	d := rec.ephemeralEnded["debugger"]
	if d == nil || d.State != runtimeapi.ContainerState_CONTAINER_EXITED || d.ExitCode != 137 || d.Reason != "ContainerStatusUnknown" || d.FinishedAt != now.UnixNano() {
		t.Errorf("the running one ended as %+v", d)
	}
	if running.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Error("the runtime's status was changed in place")
	}
	if e := rec.ephemeralEnded["done"]; e == nil || e.ExitCode != 0 || e.Id != "e" {
		t.Errorf("the exited one = %+v, want it as it ended", e)
	}
}

// An ephemeral container added to a running pod by UpdatePod runs once in the
// pod's network and in the process namespace of its target, its logs and exec
// served by name; it ends terminated with its exit code, is not started again,
// not even in a new sandbox, and leaves the pod Running and Ready. A privileged
// one on a node that allows none waits alone, the pod unharmed.
func TestEphemeralContainerRunsOnceInThePod(t *testing.T) {
	needRuntime(t)
	p, _ := newProvider(t, testConfig(t))
	ctx := context.Background()
	pod := busyboxPod("debugged", `httpd -p 8080 -h /var/www; `+sleepForever)
	if err := p.CreatePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	st := waitRunningReady(t, p, pod)

	pod = pod.DeepCopy()
	pod.Spec.EphemeralContainers = []corev1.EphemeralContainer{{
		EphemeralContainerCommon: corev1.EphemeralContainerCommon{
			Name: "debugger", Image: env.Busybox2, ImagePullPolicy: corev1.PullIfNotPresent,
			Env: []corev1.EnvVar{{Name: "WHO", Value: "debugger"}},
			// The pod's IP on its interface, main's httpd on localhost, main's
			// processes (the target's namespace); then it waits for a file
			// created through exec and exits 3.
			Command: []string{"/bin/sh", "-c", `echo "i am $WHO"; ip -4 addr show eth0 | grep -o 'inet [0-9.]*'; ` +
				`wget -qO- http://localhost:8080/index.html; ps -o comm | grep -q httpd && echo sees httpd; ` +
				`until [ -e /tmp/go ]; do sleep 0.1; done; exit 3`},
		},
		TargetContainerName: "main",
	}}
	if err := p.UpdatePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, p, pod, 60*time.Second, "debugger running", func(s *corev1.PodStatus) bool {
		return len(s.EphemeralContainerStatuses) == 1 && s.EphemeralContainerStatuses[0].State.Running != nil
	})
	want := fmt.Sprintf("i am debugger\ninet %s\nhello from busybox\nsees httpd\n", st.PodIP)
	waitFor(t, 20*time.Second, "the debugger's log", func() (bool, string) {
		rc, err := p.GetContainerLogs(ctx, pod.Namespace, pod.Name, "debugger", provider.ContainerLogOpts{})
		if err != nil {
			return false, err.Error()
		}
		got := readAll(t, rc)
		return got == want, fmt.Sprintf("%q, want %q", got, want)
	})
	if _, err := execOut(t, p, pod, "debugger", "touch", "/tmp/go"); err != nil {
		t.Fatalf("exec in the ephemeral container: %v", err)
	}
	final := waitStatus(t, p, pod, 30*time.Second, "debugger terminated", func(s *corev1.PodStatus) bool {
		return s.EphemeralContainerStatuses[0].State.Terminated != nil
	})
	if term := final.EphemeralContainerStatuses[0].State.Terminated; term.ExitCode != 3 {
		t.Errorf("debugger terminated with %d, want 3", term.ExitCode)
	}
	if final.Phase != corev1.PodRunning || condition(final, corev1.PodReady) != corev1.ConditionTrue {
		t.Errorf("pod %s after the debugger's exit, want Running and Ready", describe(final))
	}

	// Added next to it, a privileged one is refused alone; the first is not
	// started again.
	pod = pod.DeepCopy()
	pod.Spec.EphemeralContainers = append(pod.Spec.EphemeralContainers, corev1.EphemeralContainer{
		EphemeralContainerCommon: corev1.EphemeralContainerCommon{
			Name: "root", Image: env.Busybox, ImagePullPolicy: corev1.PullIfNotPresent, Command: []string{"true"},
			SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)},
		},
	})
	if err := p.UpdatePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, p, pod, 30*time.Second, "the privileged one waiting", func(s *corev1.PodStatus) bool {
		if len(s.EphemeralContainerStatuses) != 2 {
			return false
		}
		w := s.EphemeralContainerStatuses[1].State.Waiting
		return w != nil && w.Reason == "CreateContainerConfigError" && strings.Contains(w.Message, "privileged")
	})
	debuggers := func() int {
		n := 0
		for _, c := range containers(t) {
			if c.GetMetadata().GetName() == "debugger" {
				n++
			}
		}
		return n
	}
	if n := debuggers(); n != 1 {
		t.Errorf("%d debugger containers in the runtime, want the one that ran", n)
	}

	// A new sandbox: main runs again, the debugger stays as it ended.
	mainID := final.ContainerStatuses[0].ContainerID
	old := sandboxes(t)
	conn, err := env.Conn()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := runtimeapi.NewRuntimeServiceClient(conn).StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: old[0].Id}); err != nil {
		t.Fatal(err)
	}
	s := waitStatus(t, p, pod, 30*time.Second, "main running anew", func(s *corev1.PodStatus) bool {
		main := s.ContainerStatuses[0]
		return main.State.Running != nil && main.ContainerID != mainID && condition(s, corev1.PodReady) == corev1.ConditionTrue
	})
	// The dead sandbox stays, stopped, while it holds main's previous instance.
	var fresh []string
	for _, sb := range sandboxes(t) {
		if sb.Id != old[0].Id && sb.State == runtimeapi.PodSandboxState_SANDBOX_READY {
			fresh = append(fresh, sb.Id)
		}
	}
	if len(fresh) != 1 {
		t.Fatalf("%d new ready sandboxes, want one", len(fresh))
	}
	if term := s.EphemeralContainerStatuses[0].State.Terminated; term == nil || term.ExitCode != 3 {
		t.Errorf("debugger after the new sandbox: %+v, want terminated with 3", s.EphemeralContainerStatuses[0].State)
	}
	for _, c := range containers(t) {
		if c.GetMetadata().GetName() == "debugger" && c.PodSandboxId == fresh[0] {
			t.Errorf("a debugger container in the new sandbox: it ran again")
		}
	}
}
