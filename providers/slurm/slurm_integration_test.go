package slurm_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/lab/controlplane"
	"github.com/vkubelet/vkubelet/internal/lab/crienv"
	"github.com/vkubelet/vkubelet/internal/lab/slurmenv"
	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/internal/lab/testenv/nodetest"
	"github.com/vkubelet/vkubelet/internal/process/agent"
	"github.com/vkubelet/vkubelet/providers/mock"
	"github.com/vkubelet/vkubelet/providers/slurm"
)

func TestMain(m *testing.M) {
	// The controller manager signs the node's serving certificate (logs, exec).
	testenv.Main(m, controlplane.Config{ControllerManager: true})
}

// cluster is a real Slurm with a registry for the pods' images.
type cluster struct {
	env      *slurmenv.Env
	registry *crienv.Env
	image    string
	cfgFile  string
	jobRoot  string
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	env, reg, cfg, cfgFile := slurmenv.StartForTest(t, slurmenv.Options{GPUs: 2})
	return &cluster{env: env, registry: reg, image: reg.Busybox, jobRoot: cfg.JobRoot, cfgFile: cfgFile}
}

func (c *cluster) nodeConfig(t *testing.T, name string) agent.Config {
	cfg := nodetest.MockConfig(t, name, mock.Config{})
	cfg.Provider, cfg.ProviderConfig = "slurm", c.cfgFile
	cfg.SelfSignedServingCert, cfg.ApproveServingCSR = false, true
	if os.Getenv("SLURM_TEST_LOG") != "" {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil)).With("node", name)
	}
	return cfg
}

// runNode runs a node of the cluster until the test ends, its Node object deleted
// after it; stop ends it earlier.
func (c *cluster) runNode(t *testing.T, name string) (stop func()) {
	_, stop = nodetest.Run(t, c.nodeConfig(t, name))
	t.Cleanup(func() {
		_ = testenv.Client(t).CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return stop
}

// scontrol runs scontrol against the test's cluster.
func (c *cluster) scontrol(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command("scontrol", args...)
	cmd.Env = c.env.Environ()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scontrol %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// squeue runs squeue against the test's cluster.
func (c *cluster) squeue(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("squeue", append([]string{"--noheader", "--states=all"}, args...)...)
	cmd.Env = c.env.Environ()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("squeue: %v: %s", err, out)
	}
	return string(out)
}

func logs(t *testing.T, ns, pod, container string) string {
	t.Helper()
	b, err := testenv.Client(t).CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: container}).DoRaw(context.Background())
	if err != nil {
		return "error: " + err.Error()
	}
	return string(b)
}

// A node with --provider slurm runs each pod as a job of a real Slurm: the node
// has the partition's CPUs and GPUs; a pod's ConfigMap, Secret and token reach
// its containers, its init container runs first, a GPU request reaches the job,
// exit codes and logs come back; exec runs inside the running job; a deletion
// stops the containers within the grace period and leaves no job or file behind.
func TestPodsRunAsSlurmJobs(t *testing.T) {
	cl := startCluster(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx := context.Background()
	const node = "slurm-node"
	cl.runNode(t, node)

	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		gpus := n.Status.Capacity[slurm.GPUResource]
		return n.Status.Capacity.Cpu().Value() == int64(cl.env.CPUs) && gpus.Value() == 2,
			fmt.Sprintf("capacity %v, want %d CPUs and 2 GPUs", n.Status.Capacity, cl.env.CPUs)
	})

	if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "input"},
		Data: map[string]string{"n.txt": "42"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds"},
		StringData: map[string]string{"password": "hunter2"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	scratch := corev1.VolumeMount{Name: "scratch", MountPath: "/scratch"}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "solver"},
		Spec: corev1.PodSpec{NodeName: node, RestartPolicy: corev1.RestartPolicyNever,
			Volumes: []corev1.Volume{
				{Name: "input", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "input"}}}},
				{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
			InitContainers: []corev1.Container{{Name: "prepare", Image: cl.image, Command: []string{"sh", "-c", "echo prepared > /scratch/state"},
				VolumeMounts: []corev1.VolumeMount{scratch}}},
			Containers: []corev1.Container{{Name: "solve", Image: cl.image,
				Command: []string{"sh", "-c", "cat /scratch/state /input/n.txt; echo; echo pw=$PASSWORD gpus=$CUDA_VISIBLE_DEVICES; " +
					"test -s /var/run/secrets/kubernetes.io/serviceaccount/token && echo token"},
				Env: []corev1.EnvVar{{Name: "PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: "password"}}}},
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{slurm.GPUResource: resource.MustParse("1"),
					corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("64Mi")}},
				VolumeMounts: []corev1.VolumeMount{scratch, {Name: "input", MountPath: "/input"}}}},
		},
	}
	created, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	testenv.WaitPhase(t, ns, "solver", corev1.PodSucceeded)
	if got, want := logs(t, ns, "solver", "solve"), "prepared\n42\npw=hunter2 gpus=0\ntoken\n"; got != want {
		t.Errorf("logs %q, want %q", got, want)
	}
	if got := logs(t, ns, "solver", "prepare"); got != "" {
		t.Errorf("init container's logs %q", got)
	}
	// One job of that name, which asked for the GPU, the CPU and the memory.
	jobs := strings.Fields(cl.squeue(t, "--name="+string(created.UID), "--format=%i"))
	if len(jobs) != 1 {
		t.Fatalf("jobs named after the pod: %q", jobs)
	}
	cmd := exec.Command("scontrol", "show", "job", jobs[0])
	cmd.Env = cl.env.Environ()
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "gres:gpu:1") || !strings.Contains(string(out), "mem=64M") {
		t.Errorf("scontrol show job %s: %v\n%s", jobs[0], err, out)
	}

	// A failing container: the pod fails with the container's exit code.
	if _, err := c.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "failing"},
		Spec: corev1.PodSpec{NodeName: node, RestartPolicy: corev1.RestartPolicyNever,
			// Docker Hub's name: the test registry stands in for it.
			Containers: []corev1.Container{{Name: "c", Image: "busybox", Command: []string{"sh", "-c", "echo oops >&2; exit 7"}}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitPhase(t, ns, "failing", corev1.PodFailed)
	failed, err := c.CoreV1().Pods(ns).Get(ctx, "failing", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cs := failed.Status.ContainerStatuses; len(cs) != 1 || cs[0].State.Terminated == nil || cs[0].State.Terminated.ExitCode != 7 {
		t.Errorf("container statuses %+v, want exit code 7", cs)
	}

	// A long-running pod: exec inside the job, then delete it with a grace period
	// its container uses.
	if _, err := c.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "server"},
		Spec: corev1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: ptr.To[int64](20),
			Containers: []corev1.Container{{Name: "c", Image: cl.image,
				Command: []string{"sh", "-c", "trap 'echo stopping; sleep 1; exit 0' TERM; echo up; while :; do sleep 1; done"}}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitPhase(t, ns, "server", corev1.PodRunning)
	out, err := testenv.Exec(t, ns, "server", "c", "sh", "-c", "echo inside $(hostname); exit 0")
	if err != nil || out != "inside server\n" {
		t.Errorf("exec: %q, %v", out, err)
	}
	if _, err := testenv.Exec(t, ns, "server", "c", "sh", "-c", "exit 4"); err == nil || !strings.Contains(err.Error(), "exit code 4") {
		t.Errorf("exec of exit 4: %v", err)
	}
	if out, err := testenv.ExecInteractive(t, ns, "server", "c", strings.NewReader("piped\n"), false, "cat"); err != nil || out != "piped\n" {
		t.Errorf("exec -i cat: %q, %v", out, err)
	}
	if out, err := testenv.ExecInteractive(t, ns, "server", "c", strings.NewReader("tty -s && echo on-a-terminal; exit\n"), true, "sh"); err != nil ||
		!strings.Contains(out, "on-a-terminal") {
		t.Errorf("exec -it sh: %q, %v", out, err)
	}
	serverPod, _ := c.CoreV1().Pods(ns).Get(ctx, "server", metav1.GetOptions{})
	start := time.Now()
	if err := c.CoreV1().Pods(ns).Delete(ctx, "server", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, func() (bool, string) {
		_, err := c.CoreV1().Pods(ns).Get(ctx, "server", metav1.GetOptions{})
		return err != nil, "pod still in the API"
	})
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("deletion took %s: the container stops on SIGTERM at once", d)
	}
	// The compute node fails under a running job of a pod that is never
	// restarted: the job ends NODE_FAIL, the pod fails with NodeFailure.
	if _, err := c.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "victim"},
		Spec: corev1.PodSpec{NodeName: node, RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "c", Image: cl.image, Command: []string{"sleep", "3600"}}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitPhase(t, ns, "victim", corev1.PodRunning)
	cl.scontrol(t, "update", "NodeName="+cl.env.NodeName, "State=DOWN", "Reason=test")
	testenv.Eventually(t, 90*time.Second, func() (bool, string) {
		p, err := c.CoreV1().Pods(ns).Get(ctx, "victim", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Status.Phase == corev1.PodFailed && p.Status.Reason == "NodeFailure", fmt.Sprintf("%s %s %s", p.Status.Phase, p.Status.Reason, p.Status.Message)
	})
	// slurmd registering again may have brought it back already (ReturnToService=2).
	resume := exec.Command("scontrol", "update", "NodeName="+cl.env.NodeName, "State=RESUME")
	resume.Env = cl.env.Environ()
	_ = resume.Run()

	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		out := cl.squeue(t, "--name="+string(serverPod.UID), "--format=%T")
		dirs, _ := filepath.Glob(filepath.Join(cl.jobRoot, ns+"_server_*"))
		return !strings.Contains(out, "RUNNING") && len(dirs) == 0, fmt.Sprintf("job %q, directories %v", out, dirs)
	})
}

// A restarted vkubelet, killed while it submits a burst of pods, finds its jobs
// again: one job per pod, every pod Running. While slurmctld is down the node is
// NotReady; when it is back the node is Ready and the pods are still there.
func TestRestartMidBurstAndControllerDownLoseNothing(t *testing.T) {
	cl := startCluster(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx := context.Background()
	const node, pods = "slurm-restart", 12
	stop := cl.runNode(t, node)
	for i := range pods {
		if _, err := c.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%d", i)},
			Spec: corev1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: ptr.To[int64](2),
				Containers: []corev1.Container{{Name: "c", Image: cl.image, Command: []string{"sleep", "3600"},
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("16Mi")}}}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Stop the node once some pods, not all, have a job.
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		n := len(strings.Fields(cl.squeue(t, "--format=%i")))
		return n >= 3, fmt.Sprintf("%d jobs", n)
	})
	jobsAtStop := len(strings.Fields(cl.squeue(t, "--format=%i")))
	stop()
	restarted := time.Now()
	cl.runNode(t, node)
	for i := range pods {
		testenv.WaitPhase(t, ns, fmt.Sprintf("p%d", i), corev1.PodRunning)
	}
	t.Logf("stopped with %d of %d jobs submitted; every pod Running %.1fs after the restart", jobsAtStop, pods, time.Since(restarted).Seconds())
	list, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]int{}
	for _, line := range strings.Fields(cl.squeue(t, "--format=%j")) {
		names[line]++
	}
	for _, p := range list.Items {
		if names[string(p.UID)] != 1 {
			t.Errorf("pod %s has %d jobs", p.Name, names[string(p.UID)])
		}
	}
	if len(names) != pods {
		t.Errorf("%d job names for %d pods: %v", len(names), pods, names)
	}

	ready := func() corev1.ConditionStatus {
		n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return ""
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status
			}
		}
		return ""
	}
	stopped := time.Now()
	if err := cl.env.StopController(); err != nil {
		t.Fatal(err)
	}
	// Pings fail, the lease (10 s in the tests) is not renewed, and the node
	// lifecycle controller marks the node's Ready condition Unknown.
	testenv.Eventually(t, 60*time.Second, func() (bool, string) {
		return ready() != corev1.ConditionTrue, fmt.Sprintf("Ready %s", ready())
	})
	notReady := time.Since(stopped)
	started := time.Now()
	if err := cl.env.StartController(ctx); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, func() (bool, string) {
		return ready() == corev1.ConditionTrue, fmt.Sprintf("Ready %s", ready())
	})
	t.Logf("slurmctld stopped: node not Ready after %.1fs; started: node Ready %.1fs later", notReady.Seconds(), time.Since(started).Seconds())
	for i := range pods {
		testenv.WaitPhase(t, ns, fmt.Sprintf("p%d", i), corev1.PodRunning)
	}
	if n := len(strings.Fields(cl.squeue(t, "--states=RUNNING", "--format=%i"))); n != pods {
		t.Errorf("%d jobs running after slurmctld came back, want %d", n, pods)
	}
}

// A pod past its activeDeadlineSeconds is stopped (by the node at the deadline,
// with Slurm's time limit as a backstop) and fails with DeadlineExceeded; a crash-looping container is restarted inside the job
// with its restart count and previous logs; logs -f follows a running container.
func TestDeadlineRestartsAndFollowedLogs(t *testing.T) {
	t.Parallel() // mostly waiting for Slurm's minute-granular time limit
	cl := startCluster(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx := context.Background()
	const node = "slurm-deadline"
	cl.runNode(t, node)
	create := func(name string, spec corev1.PodSpec) {
		spec.NodeName = node
		if _, err := c.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create("deadline", corev1.PodSpec{ActiveDeadlineSeconds: ptr.To[int64](30), RestartPolicy: corev1.RestartPolicyNever,
		Containers: []corev1.Container{{Name: "c", Image: cl.image, Command: []string{"sleep", "3600"}}}})
	create("crasher", corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: cl.image,
		Command: []string{"sh", "-c", "echo run at $(date +%s.%N); exit 1"}}}})
	create("ticker", corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: cl.image,
		Command: []string{"sh", "-c", "i=0; while :; do echo tick $i; i=$((i+1)); sleep 0.3; done"}}}})

	testenv.WaitPhase(t, ns, "ticker", corev1.PodRunning)
	req := c.CoreV1().Pods(ns).GetLogs("ticker", &corev1.PodLogOptions{Follow: true})
	stream, err := req.Stream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	buf := make([]byte, 4096)
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(got.String(), "tick 12\n") && time.Now().Before(deadline) {
		n, err := stream.Read(buf)
		got.Write(buf[:n])
		if err != nil {
			break
		}
	}
	stream.Close()
	if !strings.HasPrefix(got.String(), "tick 0\ntick 1\n") || !strings.Contains(got.String(), "tick 12\n") {
		t.Errorf("followed logs: %q", got.String())
	}
	// kubectl attach: the running process's output from now on.
	if out := attachFor(t, ns, "ticker", "c", 4*time.Second); !strings.Contains(out, "tick ") || strings.Contains(out, "tick 0\n") {
		t.Errorf("attach: %q", out)
	}

	// The kubelet's back-off: 10 s, then 20 s. After the first restart the
	// previous instance's logs are kept.
	testenv.Eventually(t, 60*time.Second, func() (bool, string) {
		p, err := c.CoreV1().Pods(ns).Get(ctx, "crasher", metav1.GetOptions{})
		if err != nil || len(p.Status.ContainerStatuses) == 0 {
			return false, fmt.Sprint(err)
		}
		cs := p.Status.ContainerStatuses[0]
		return cs.RestartCount >= 1 && cs.LastTerminationState.Terminated != nil && cs.LastTerminationState.Terminated.ExitCode == 1,
			fmt.Sprintf("restarts %d, state %+v, last %+v", cs.RestartCount, cs.State, cs.LastTerminationState)
	})
	prev, err := c.CoreV1().Pods(ns).GetLogs("crasher", &corev1.PodLogOptions{Previous: true}).DoRaw(ctx)
	if err != nil || !strings.HasPrefix(string(prev), "run at ") {
		t.Errorf("previous logs: %q, %v", prev, err)
	}

	// The node stops the job at 30 s; Slurm's limit, in whole minutes, would after one.
	testenv.Eventually(t, 150*time.Second, func() (bool, string) {
		p, err := c.CoreV1().Pods(ns).Get(ctx, "deadline", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Status.Phase == corev1.PodFailed && p.Status.Reason == "DeadlineExceeded", fmt.Sprintf("%s %s %s", p.Status.Phase, p.Status.Reason, p.Status.Message)
	})
}

// attachFor attaches to a container's output through the API server, as kubectl
// attach does, for d, and returns what came.
func attachFor(t *testing.T, ns, pod, container string, d time.Duration) string {
	t.Helper()
	cp := testenv.ControlPlane(t)
	req := testenv.Client(t).CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("attach").
		VersionedParams(&corev1.PodAttachOptions{Container: container, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	exec, err := remotecommand.NewSPDYExecutor(cp.RESTConfig, http.MethodPost, req.URL())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var out testenv.Buffer
	_ = exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &out})
	return out.String()
}
