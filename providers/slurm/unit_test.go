package slurm

import (
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vkubelet/vkubelet/provider"
)

func testPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u-1"},
		Spec: corev1.PodSpec{
			RestartPolicy:  corev1.RestartPolicyNever,
			InitContainers: []corev1.Container{{Name: "init", Image: "busybox"}},
			Containers: []corev1.Container{
				{Name: "a", Image: "busybox", Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("100Mi")},
					Limits:   corev1.ResourceList{GPUResource: resource.MustParse("1")},
				}},
				{Name: "b", Image: "busybox", Resources: corev1.ResourceRequirements{
					Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1G")},
				}},
			},
		},
	}
}

func TestSubmitFlagsCarryTheEffectivePodRequestAndTheAnnotations(t *testing.T) {
	pod := testPod()
	pod.Spec.InitContainers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")}
	pod.Spec.ActiveDeadlineSeconds = ptr(int64(90))
	pod.Annotations = map[string]string{AnnotationPartition: "gpu", AnnotationFlags: "--exclusive --comment=x"}
	got, err := submitFlags(pod, Config{Partition: "batch", Account: "acct"}, "/jobs/d")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"--job-name=u-1", "--output=/jobs/d/slurm.out", "--chdir=/jobs/d", "--nodes=1", "--ntasks=1",
		"--no-requeue", "--cpus-per-task=3", "--mem=1054M", "--gres=gpu:1", "--time=2",
		"--partition=gpu", "--account=acct", "--exclusive", "--comment=x"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("flags\n got %q\nwant %q", got, want)
	}
	for _, bad := range []string{"--uid=0", "--output=/etc/x", "-p", "--chdir=/"} {
		pod.Annotations[AnnotationFlags] = bad
		if _, err := submitFlags(pod, Config{}, "/d"); err == nil {
			t.Errorf("annotation flags %q accepted", bad)
		}
	}
}

func TestParseSqueueSinfoAndGres(t *testing.T) {
	jobs := parseJobs([]byte("12|RUNNING|vk1|u-1|None\n13|PENDING||u-2|Resources and more\ngarbage\n"))
	want := []job{{ID: "12", State: "RUNNING", Node: "vk1", Name: "u-1", Reason: "None"},
		{ID: "13", State: "PENDING", Name: "u-2", Reason: "Resources and more"}}
	if !reflect.DeepEqual(jobs, want) {
		t.Errorf("jobs = %+v", jobs)
	}
	nodes := parseNodes([]byte("n1|8|32000|gpu:2|idle\nn1|8|32000|gpu:2|idle\nn2|4+|16000|gpu:a100:1(S:0),mps:10|mixed\nn3|2|1000|(null)|idle\n"))
	if len(nodes) != 3 || nodes[0].GPUs != 2 || nodes[1].GPUs != 1 || nodes[1].CPUs != 4 || nodes[2].GPUs != 0 {
		t.Errorf("nodes = %+v", nodes)
	}
	rl := capacityOf(nodes, 110)
	if rl.Cpu().Value() != 14 || rl.Memory().Value() != 49000<<20 || rl.Pods().Value() != 110 {
		t.Errorf("capacity = %v", rl)
	}
	if q := rl[GPUResource]; q.Value() != 3 {
		t.Errorf("GPUs = %v", q.String())
	}
}

func TestPodStatusFollowsTheJobAndTheRecordedInstances(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ran := func(code int32) instance {
		return instance{started: t0, exited: true, exitCode: code, finished: t0.Add(time.Second)}
	}
	running := instance{started: t0}
	cases := []struct {
		name      string
		job       jobView
		ins       map[string][]instance
		phase     corev1.PodPhase
		reason    string
		initState string // waiting reason, running, or exit code
		aState    string
	}{
		{"submitting", jobView{}, nil, corev1.PodPending, "", "ContainerCreating", "PodInitializing"},
		{"pending in the queue", jobView{ID: "7", Known: true, job: job{State: "PENDING", Reason: "Resources"}}, nil,
			corev1.PodPending, "", "ContainerCreating", "PodInitializing"},
		{"init running", jobView{ID: "7", Known: true, job: job{State: "RUNNING"}}, map[string][]instance{"init": {running}},
			corev1.PodPending, "", "running", "PodInitializing"},
		{"apps running", jobView{ID: "7", Known: true, job: job{State: "RUNNING"}},
			map[string][]instance{"init": {ran(0)}, "a": {running}, "b": {running}}, corev1.PodRunning, "", "0", "running"},
		{"completed", jobView{ID: "7", Known: true, job: job{State: "COMPLETED"}},
			map[string][]instance{"init": {ran(0)}, "a": {ran(0)}, "b": {ran(0)}}, corev1.PodSucceeded, "", "0", "0"},
		{"one app failed", jobView{ID: "7", Known: true, job: job{State: "FAILED"}},
			map[string][]instance{"init": {ran(0)}, "a": {ran(3)}, "b": {ran(0)}}, corev1.PodFailed, "", "0", "3"},
		{"deadline", jobView{ID: "7", Known: true, job: job{State: "TIMEOUT"}},
			map[string][]instance{"init": {ran(0)}, "a": {running}, "b": {running}}, corev1.PodFailed, "DeadlineExceeded", "0", "137"},
		{"purged from squeue after success", jobView{ID: "7"},
			map[string][]instance{"init": {ran(0)}, "a": {ran(0)}, "b": {ran(0)}}, corev1.PodSucceeded, "", "0", "0"},
		{"lost", jobView{ID: "7"}, map[string][]instance{"init": {ran(0)}, "a": {running}}, corev1.PodFailed, "", "0", "137"},
	}
	state := func(cs corev1.ContainerStatus) string {
		switch {
		case cs.State.Waiting != nil:
			return cs.State.Waiting.Reason
		case cs.State.Running != nil:
			return "running"
		case cs.State.Terminated != nil:
			return strconv.Itoa(int(cs.State.Terminated.ExitCode))
		}
		return "?"
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := podStatus(testPod(), c.job, c.ins, t0)
			if st.Phase != c.phase || st.Reason != c.reason {
				t.Errorf("phase %s reason %q, want %s %q (%s)", st.Phase, st.Reason, c.phase, c.reason, st.Message)
			}
			if got := state(st.InitContainerStatuses[0]); got != c.initState {
				t.Errorf("init container: %s, want %s", got, c.initState)
			}
			if got := state(st.ContainerStatuses[0]); got != c.aState {
				t.Errorf("container a: %s, want %s", got, c.aState)
			}
		})
	}
}

func TestARestartedContainerReportsItsCountAndLastState(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	pod := testPod()
	pod.Spec.RestartPolicy = corev1.RestartPolicyAlways
	ins := map[string][]instance{
		"init": {{started: t0, exited: true}},
		"a":    {{started: t0, exited: true, exitCode: 1}, {started: t0, exited: true, exitCode: 2}, {waitingReason: "CrashLoopBackOff", waitingMessage: "back-off 20s"}},
		"b":    {{started: t0}},
	}
	st := podStatus(pod, jobView{ID: "1", Known: true, job: job{State: "RUNNING"}}, ins, t0)
	a := st.ContainerStatuses[0]
	if a.RestartCount != 2 || a.State.Waiting == nil || a.State.Waiting.Reason != "CrashLoopBackOff" ||
		a.LastTerminationState.Terminated == nil || a.LastTerminationState.Terminated.ExitCode != 2 {
		t.Errorf("container a: %+v", a)
	}
	if st.Phase != corev1.PodRunning || st.Conditions[3].Status != corev1.ConditionFalse {
		t.Errorf("phase %s, ready %s", st.Phase, st.Conditions[3].Status)
	}
}

func TestReadInstancesReadsWhatTheScriptWrites(t *testing.T) {
	dir := t.TempDir()
	write := func(path, data string) {
		p := filepath.Join(dir, containerDir, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a/0/started", "2026-01-01T00:00:00.5Z\n")
	write("a/0/exit", "3 2026-01-01T00:00:02.000000001Z\n")
	write("a/1/waiting", "ErrImagePull\nmanifest unknown\nsecond line\n")
	got := readInstances(dir, "a")
	if len(got) != 2 || got[0].exitCode != 3 || !got[0].exited || got[0].finished.Nanosecond() != 1 ||
		got[1].waitingReason != "ErrImagePull" || got[1].waitingMessage != "manifest unknown\nsecond line" {
		t.Errorf("instances = %+v", got)
	}
}

func TestTheScriptQuotesEverythingThePodSays(t *testing.T) {
	pod := testPod()
	pod.Spec.Containers[0].Command = []string{"sh", "-c", "echo '$(X)' \"$HOME\"; rm -rf /"}
	pod.Spec.Containers[0].Args = []string{"$(X)"}
	rp := &provider.ResolvedPod{Pod: pod, Env: map[string][]corev1.EnvVar{"a": {{Name: "X", Value: "it's; $(whoami)"}}}}
	s, err := jobScript(rp, scriptOptions{dir: "/jobs/d", podman: []string{"podman", "--root=/x y"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`podman() { command 'podman' '--root=/x y' "$@"; }`,
		`'--env=X=it'\''s; $(whoami)'`,
		`'--entrypoint=["sh","-c","echo '\''it'\''s; $(whoami)'\'' \"$HOME\"; rm -rf /"]'`,
		`'busybox' 'it'\''s; $(whoami)' &`,
	} {
		if !strings.Contains(s, want) {
			t.Errorf("script lacks %s:\n%s", want, s)
		}
	}
	pod.Spec.InitContainers[0].RestartPolicy = ptr(corev1.ContainerRestartPolicyAlways)
	if _, err := jobScript(rp, scriptOptions{dir: "/d"}); err == nil || !strings.Contains(err.Error(), "sidecar") {
		t.Errorf("sidecar accepted: %v", err)
	}
}
