package kube_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/lab/controlplane"
	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/internal/process/agent"
	"github.com/vkubelet/vkubelet/providers/kube"
	"github.com/vkubelet/vkubelet/providers/mock"
	"github.com/vkubelet/vkubelet/providers/providerutil"
)

// The source cluster is the package's control plane; its virtual node vk-kube runs
// the kube provider against a second control plane, the target, whose only worker
// is a mock virtual node (zone "burst", which the provider is told to count).
const (
	sourceNode = "vk-kube"
	targetNode = "target-worker"
	clusterID  = "src"
)

func TestMain(m *testing.M) {
	testenv.Main(m, controlplane.Config{Scheduler: true, ControllerManager: true, NodeMonitorGracePeriod: 8 * time.Second})
}

var env struct {
	once   sync.Once
	err    error
	target *controlplane.ControlPlane
	tc     kubernetes.Interface
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// runNode runs an in-process node until the test binary exits.
func runNode(cfg agent.Config) error {
	n, err := agent.New(context.Background(), cfg)
	if err != nil {
		return err
	}
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- n.Run(context.Background(), func() { close(ready) }) }()
	select {
	case <-ready:
		return nil
	case err := <-done:
		return fmt.Errorf("node %s stopped: %v", cfg.NodeName, err)
	case <-time.After(2 * time.Minute):
		return fmt.Errorf("node %s not ready", cfg.NodeName)
	}
}

// setup starts, once per package, the target control plane, its mock worker and the
// source's kube node.
func setup(t *testing.T) kubernetes.Interface {
	t.Helper()
	src := testenv.ControlPlane(t)
	env.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		target, err := controlplane.Start(ctx, controlplane.Config{Scheduler: true, ControllerManager: true})
		if err != nil {
			env.err = fmt.Errorf("target control plane: %w", err)
			return
		}
		testenv.AtExit(func() { _ = target.Stop() })
		env.target = target
		dir, _ := os.MkdirTemp("", "kube-provider-test-")
		testenv.AtExit(func() { _ = os.RemoveAll(dir) })

		mockCfg := filepath.Join(dir, "mock.json")
		b, _ := json.Marshal(mock.Config{Zone: "burst"})
		_ = os.WriteFile(mockCfg, b, 0o644)
		base := agent.Config{
			InternalIP: "127.0.0.1", PodSyncWorkers: 10, ApproveServingCSR: true,
			StatusPollInterval: time.Second, StartupTimeout: 2 * time.Minute,
			LeaseDuration: 10 * time.Second, RenewInterval: 2 * time.Second,
			KubeAPIQPS: 100, KubeAPIBurst: 200, Logger: quietLogger(),
		}
		w := base
		w.NodeName, w.Provider, w.ProviderConfig, w.RESTConfig, w.CertDir = targetNode, "mock", mockCfg, target.RESTConfig, filepath.Join(dir, "worker")
		if env.err = runNode(w); env.err != nil {
			return
		}

		kubeCfg := filepath.Join(dir, "kube.json")
		b, _ = json.Marshal(kube.Config{Kubeconfig: target.KubeconfigPath, ClusterID: clusterID,
			CountNodes: "topology.kubernetes.io/zone=burst", PingTimeout: providerutil.Duration{Duration: 2 * time.Second}})
		_ = os.WriteFile(kubeCfg, b, 0o644)
		k := base
		k.NodeName, k.Provider, k.ProviderConfig, k.RESTConfig, k.CertDir = sourceNode, "kube", kubeCfg, src.RESTConfig, filepath.Join(dir, "kube")
		if env.err = runNode(k); env.err != nil {
			return
		}
		rc := rest.CopyConfig(target.RESTConfig)
		rc.QPS, rc.Burst = 500, 1000
		env.tc, env.err = kubernetes.NewForConfig(rc)
	})
	if env.err != nil {
		t.Fatal(env.err)
	}
	return env.tc
}

func targetNamespace(ns string) string { return ns + "-" + clusterID }

func offloaded() metav1.ListOptions {
	return metav1.ListOptions{LabelSelector: kube.LabelOffloadedBy + "=" + clusterID + "." + sourceNode}
}

func podSpec(args ...string) corev1.PodSpec {
	return corev1.PodSpec{
		Containers:   []corev1.Container{{Name: "main", Image: "busybox", Args: args, Ports: []corev1.ContainerPort{{ContainerPort: 8080}}}},
		Tolerations:  []corev1.Toleration{{Key: "virtual-kubelet.io/provider", Operator: corev1.TolerationOpExists}},
		NodeSelector: map[string]string{"kubernetes.io/hostname": sourceNode},
	}
}

func runningPods(ctx context.Context, c kubernetes.Interface, ns string) (running, total int, pods []corev1.Pod) {
	l, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, 0, nil
	}
	for _, p := range l.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			running++
		}
	}
	return running, len(l.Items), l.Items
}

// copies counts the ConfigMaps and Secrets the provider made in the target namespace.
func copies(ctx context.Context, tc kubernetes.Interface, ns string) int {
	cms, err1 := tc.CoreV1().ConfigMaps(ns).List(ctx, offloaded())
	ss, err2 := tc.CoreV1().Secrets(ns).List(ctx, offloaded())
	if err1 != nil || err2 != nil {
		return -1
	}
	return len(cms.Items) + len(ss.Items)
}

func createPod(t *testing.T, c kubernetes.Interface, ns, name string, spec corev1.PodSpec) {
	t.Helper()
	_, err := c.CoreV1().Pods(ns).Create(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

func waitRunning(t *testing.T, c kubernetes.Interface, ns, name string) *corev1.Pod {
	t.Helper()
	var p *corev1.Pod
	testenv.Eventually(t, 60*time.Second, func() (bool, string) {
		var err error
		p, err = c.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Status.Phase == corev1.PodRunning, fmt.Sprintf("%s/%s is %s", ns, name, p.Status.Phase)
	})
	return p
}

// Done when: a Deployment of 10 replicas yields 10 Running pods in the target and
// 10 Running pods in the source mirroring them; deleting it removes every target
// pod and copy.
func TestDeploymentRunsInTheTargetAndGoesAwayWithIt(t *testing.T) {
	tc := setup(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	tns := targetNamespace(ns)
	ctx := context.Background()

	labels := map[string]string{"app": "burst"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "burst"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](10),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: podSpec("hello")},
		},
	}
	if _, err := c.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 120*time.Second, func() (bool, string) {
		sr, st, _ := runningPods(ctx, c, ns)
		tr, tt, _ := runningPods(ctx, tc, tns)
		return sr == 10 && tr == 10, fmt.Sprintf("source %d/%d Running, target %d/%d Running", sr, st, tr, tt)
	})
	_, _, sp := runningPods(ctx, c, ns)
	_, _, tp := runningPods(ctx, tc, tns)
	byName := map[string]corev1.Pod{}
	for _, p := range tp {
		byName[p.Name] = p
	}
	for _, p := range sp {
		tgt, ok := byName[p.Name]
		if !ok {
			t.Errorf("source pod %s has no target pod", p.Name)
			continue
		}
		if p.Spec.NodeName != sourceNode || tgt.Spec.NodeName != targetNode {
			t.Errorf("pod %s on %q, target pod on %q", p.Name, p.Spec.NodeName, tgt.Spec.NodeName)
		}
		if p.Status.PodIP == "" || p.Status.PodIP != tgt.Status.PodIP {
			t.Errorf("pod %s IP %q, target pod IP %q", p.Name, p.Status.PodIP, tgt.Status.PodIP)
		}
		if tgt.Annotations[kube.AnnotationOriginUID] != string(p.UID) || tgt.Annotations[kube.AnnotationOriginNamespace] != ns {
			t.Errorf("target pod %s annotations %v", tgt.Name, tgt.Annotations)
		}
		if len(tgt.OwnerReferences) != 0 || ptr.Deref(tgt.Spec.AutomountServiceAccountToken, true) {
			t.Errorf("target pod %s: owners %v, automount %v", tgt.Name, tgt.OwnerReferences, tgt.Spec.AutomountServiceAccountToken)
		}
		for _, v := range tgt.Spec.Volumes {
			if strings.HasPrefix(v.Name, "kube-api-access-") {
				t.Errorf("target pod %s has the token volume %s", tgt.Name, v.Name)
			}
		}
	}

	if n := copies(ctx, tc, tns); n < 10 {
		t.Errorf("%d copies in the target, want one env Secret per pod at least", n)
	}

	if err := c.AppsV1().Deployments(ns).Delete(ctx, "burst", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 120*time.Second, func() (bool, string) {
		_, st, _ := runningPods(ctx, c, ns)
		_, tt, _ := runningPods(ctx, tc, tns)
		n := copies(ctx, tc, tns)
		return st == 0 && tt == 0 && n == 0, fmt.Sprintf("%d source pods, %d target pods, %d copies left", st, tt, n)
	})
}

// Done when: a pod's ConfigMap and Secret appear in the target; updating the
// ConfigMap in the source updates the copy; the copies go with the pod.
// Done when: a pod pinned to the virtual node by node affinity, as the Kubernetes
// e2e framework pins its pods (metadata.name In [node], not a nodeSelector),
// runs in the target, on the target's node.
func TestAPodPinnedToTheNodeByAffinityRunsInTheTarget(t *testing.T) {
	tc := setup(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	spec := podSpec("hi")
	spec.NodeSelector = nil
	spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{
			{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{sourceNode}}}}}}}}
	createPod(t, c, ns, "pinned", spec)
	if p := waitRunning(t, c, ns, "pinned"); p.Spec.NodeName != sourceNode {
		t.Fatalf("the source pod is on %q, want %s", p.Spec.NodeName, sourceNode)
	}
	tp, err := tc.CoreV1().Pods(targetNamespace(ns)).Get(context.Background(), "pinned", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if tp.Spec.NodeName != targetNode {
		t.Errorf("the target pod is on %q, want %s", tp.Spec.NodeName, targetNode)
	}
}

func TestConfigMapAndSecretFollowThePod(t *testing.T) {
	tc := setup(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	tns := targetNamespace(ns)
	ctx := context.Background()

	if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "conf"},
		Data: map[string]string{"app.yaml": "level: info"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds"},
		StringData: map[string]string{"password": "s3cret"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	spec := podSpec("hi")
	spec.Volumes = []corev1.Volume{
		{Name: "conf", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "conf"}}}},
		{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "creds"}}},
	}
	spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "conf", MountPath: "/etc/conf"}, {Name: "creds", MountPath: "/etc/creds"}}
	spec.Containers[0].Env = []corev1.EnvVar{{Name: "PASSWORD", ValueFrom: &corev1.EnvVarSource{
		SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: "password"}}}}
	createPod(t, c, ns, "app", spec)
	waitRunning(t, c, ns, "app")

	tp, err := tc.CoreV1().Pods(tns).Get(ctx, "app", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vols := map[string]corev1.Volume{}
	for _, v := range tp.Spec.Volumes {
		vols[v.Name] = v
	}
	cmRef, secRef := vols["conf"].ConfigMap, vols["creds"].Secret
	if cmRef == nil || secRef == nil {
		t.Fatalf("target volumes %+v", tp.Spec.Volumes)
	}
	sec, err := tc.CoreV1().Secrets(tns).Get(ctx, secRef.SecretName, metav1.GetOptions{})
	if err != nil || string(sec.Data[secRef.Items[0].Key]) != "s3cret" || secRef.Items[0].Path != "password" {
		t.Fatalf("secret copy %v: %v", sec, err)
	}
	env := tp.Spec.Containers[0].Env
	var pw string
	for _, e := range env {
		if e.Name == "PASSWORD" {
			if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
				t.Fatalf("PASSWORD in the target spec: %+v", e)
			}
			s, err := tc.CoreV1().Secrets(tns).Get(ctx, e.ValueFrom.SecretKeyRef.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			pw = string(s.Data[e.ValueFrom.SecretKeyRef.Key])
		}
	}
	if pw != "s3cret" {
		t.Fatalf("PASSWORD = %q in the target", pw)
	}
	cmData := func() string {
		cm, err := tc.CoreV1().ConfigMaps(tns).Get(ctx, cmRef.Name, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		return cm.Data[cmRef.Items[0].Key]
	}
	if got := cmData(); got != "level: info" {
		t.Fatalf("ConfigMap copy = %q", got)
	}

	if _, err := c.CoreV1().ConfigMaps(ns).Update(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "conf"},
		Data: map[string]string{"app.yaml": "level: debug"}}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, func() (bool, string) {
		got := cmData()
		return got == "level: debug", fmt.Sprintf("ConfigMap copy = %q", got)
	})
	// What the target's worker mounts and runs with: its mock prints files and env.
	testenv.Eventually(t, 60*time.Second, func() (bool, string) {
		got, err := kubectlErr(t, "", "exec", "-n", ns, "app", "--", "cat", "/etc/conf/app.yaml")
		return got == "level: debug", fmt.Sprintf("file in the target pod = %q (%v)", got, err)
	})
	if got := kubectl(t, "exec", "-n", ns, "app", "--", "cat", "/etc/creds/password"); got != "s3cret" {
		t.Errorf("secret file in the target pod = %q", got)
	}
	if got := kubectl(t, "exec", "-n", ns, "app", "--", "env"); !strings.Contains(got, "PASSWORD=s3cret\n") {
		t.Errorf("env in the target pod = %q", got)
	}

	if err := c.CoreV1().Pods(ns).Delete(ctx, "app", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, func() (bool, string) {
		_, tt, _ := runningPods(ctx, tc, tns)
		n := copies(ctx, tc, tns)
		return tt == 0 && n == 0, fmt.Sprintf("%d target pods, %d copies left", tt, n)
	})
}

// kubectlErr runs the source cluster's kubectl with stdin.
func kubectlErr(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	cp := testenv.ControlPlane(t)
	cmd := exec.Command(cp.Binaries.Kubectl, append([]string{"--kubeconfig", cp.KubeconfigPath}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("kubectl %s: %v: %s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

func kubectl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := kubectlErr(t, "", args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Done when: kubectl logs and kubectl exec on the source pod reach the target pod
// (whose mock worker replays the args as logs and echoes exec commands).
func TestLogsAndExecReachTheTargetPod(t *testing.T) {
	setup(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	createPod(t, c, ns, "talker", podSpec("first", "second", "third"))
	waitRunning(t, c, ns, "talker")

	if got := kubectl(t, "logs", "-n", ns, "talker"); got != "first\nsecond\nthird\n" {
		t.Fatalf("kubectl logs = %q", got)
	}
	if got := kubectl(t, "logs", "-n", ns, "talker", "--tail=1"); got != "third\n" {
		t.Fatalf("kubectl logs --tail=1 = %q", got)
	}
	if got := kubectl(t, "exec", "-n", ns, "talker", "--", "echo", "hi"); got != "echo hi\n" {
		t.Fatalf("kubectl exec = %q", got)
	}
	if got, err := kubectlErr(t, "ping\n", "exec", "-i", "-n", ns, "talker", "--", "cat"); err != nil || got != "cat\nping\n" {
		t.Fatalf("kubectl exec -i = %q, %v", got, err)
	}
	if _, err := kubectlErr(t, "", "exec", "-n", ns, "talker", "--", "exit", "3"); err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("kubectl exec exit 3: %v", err)
	}
	if got, err := kubectlErr(t, "hello\n", "attach", "-i", "-n", ns, "talker"); err != nil || !strings.Contains(got, "hello\n") {
		t.Fatalf("kubectl attach -i = %q, %v", got, err)
	}

	// port-forward: the mock's ports echo.
	cp := testenv.ControlPlane(t)
	cmd := exec.Command(cp.Binaries.Kubectl, "--kubeconfig", cp.KubeconfigPath, "port-forward", "-n", ns, "pod/talker", ":8080")
	stdout, _ := cmd.StdoutPipe()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	m := regexp.MustCompile(`Forwarding from (127\.0\.0\.1:\d+) -> 8080`).FindStringSubmatch(line)
	if err != nil || m == nil {
		t.Fatalf("port-forward said %q (%v): %s", line, err, stderr.String())
	}
	conn, err := net.Dial("tcp", m[1])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	payload := bytes.Repeat([]byte("0123456789abcdef"), 4096)
	go func() { _, _ = conn.Write(payload) }()
	got := make([]byte, len(payload))
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.ReadFull(conn, got); err != nil {
		t.Fatalf("reading the echo through the target: %v", err)
	}
	if !bytes.Equal(got, payload) {
		t.Fatal("bytes came back changed")
	}
}

func allocatable(t *testing.T, c kubernetes.Interface, node string, r corev1.ResourceName) resource.Quantity {
	t.Helper()
	n, err := c.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n.Status.Allocatable[r]
}

// Done when: node capacity equals the target's free capacity and follows a node
// added there.
func TestCapacityFollowsTheTarget(t *testing.T) {
	tc := setup(t)
	c := testenv.Client(t)
	ctx := context.Background()

	// The mock worker offers 20 CPUs; nothing else runs there that requests any.
	want := resource.MustParse(mock.DefaultCPU)
	if got := allocatable(t, c, sourceNode, corev1.ResourceCPU); got.Cmp(want) != 0 {
		t.Fatalf("cpu = %s, want %s", got.String(), want.String())
	}

	extra := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "extra", Labels: map[string]string{"topology.kubernetes.io/zone": "burst"}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "test", Effect: corev1.TaintEffectNoSchedule}}}}
	if _, err := tc.CoreV1().Nodes().Create(ctx, extra, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tc.CoreV1().Nodes().Delete(context.Background(), "extra", metav1.DeleteOptions{}) })
	status, _ := json.Marshal(map[string]any{"status": corev1.NodeStatus{
		Capacity:    corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), "example.com/fpga": resource.MustParse("2")},
		Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), "example.com/fpga": resource.MustParse("2")},
		Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}},
	}})
	if _, err := tc.CoreV1().Nodes().Patch(ctx, extra.Name, types.StrategicMergePatchType, status, metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		cpu := allocatable(t, c, sourceNode, corev1.ResourceCPU)
		fpga := allocatable(t, c, sourceNode, "example.com/fpga")
		return cpu.Cmp(resource.MustParse("24")) == 0 && fpga.Cmp(resource.MustParse("2")) == 0,
			fmt.Sprintf("cpu %s, fpga %s", cpu.String(), fpga.String())
	})
	if err := tc.CoreV1().Nodes().Delete(ctx, "extra", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		cpu := allocatable(t, c, sourceNode, corev1.ResourceCPU)
		return cpu.Cmp(want) == 0, fmt.Sprintf("cpu %s after removing the node", cpu.String())
	})
}

func nodeReady(t *testing.T, c kubernetes.Interface) corev1.ConditionStatus {
	t.Helper()
	n, err := c.CoreV1().Nodes().Get(context.Background(), sourceNode, metav1.GetOptions{})
	if err != nil {
		return "error: " + corev1.ConditionStatus(err.Error())
	}
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status
		}
	}
	return ""
}

// Done when: stopping the target's API server makes the node NotReady, restarting it
// makes it Ready again, and pods created and deleted meanwhile are reconciled; a
// target pod deleted behind our back comes back.
func TestTargetOutageIsReconciled(t *testing.T) {
	tc := setup(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	tns := targetNamespace(ns)
	ctx := context.Background()

	createPod(t, c, ns, "before", podSpec("x"))
	waitRunning(t, c, ns, "before")
	// Deleted in the target by someone else: created again (restartPolicy Always).
	old, err := tc.CoreV1().Pods(tns).Get(ctx, "before", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := tc.CoreV1().Pods(tns).Delete(ctx, "before", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, func() (bool, string) {
		p, err := tc.CoreV1().Pods(tns).Get(ctx, "before", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.UID != old.UID && p.Status.Phase == corev1.PodRunning, fmt.Sprintf("target pod %s %s", p.UID, p.Status.Phase)
	})

	if err := env.target.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = env.target.StartAPIServer(context.Background())
		}
	})
	testenv.Eventually(t, 60*time.Second, func() (bool, string) {
		s := nodeReady(t, c)
		return s != corev1.ConditionTrue, fmt.Sprintf("source node Ready=%s", s)
	})
	// While the target is away: one pod deleted, one created (bound directly).
	if err := c.CoreV1().Pods(ns).Delete(ctx, "before", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](5)}); err != nil {
		t.Fatal(err)
	}
	spec := podSpec("y")
	spec.NodeName = sourceNode
	createPod(t, c, ns, "during", spec)
	if p, err := c.CoreV1().Pods(ns).Get(ctx, "before", metav1.GetOptions{}); err != nil || p.DeletionTimestamp == nil {
		t.Fatalf("pod 'before' should wait for the target: %v %v", p, err)
	}

	if err := env.target.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	restarted = true
	testenv.Eventually(t, 60*time.Second, func() (bool, string) {
		s := nodeReady(t, c)
		return s == corev1.ConditionTrue, fmt.Sprintf("source node Ready=%s", s)
	})
	waitRunning(t, c, ns, "during")
	testenv.Eventually(t, 120*time.Second, func() (bool, string) {
		_, _, sp := runningPods(ctx, c, ns)
		_, _, tp := runningPods(ctx, tc, tns)
		var names []string
		for _, p := range sp {
			names = append(names, "source:"+p.Name)
		}
		for _, p := range tp {
			names = append(names, "target:"+p.Name+":"+string(p.Status.Phase))
		}
		ok := len(sp) == 1 && len(tp) == 1 && sp[0].Name == "during" && tp[0].Name == "during" && tp[0].Status.Phase == corev1.PodRunning
		return ok, fmt.Sprintf("pods %v", names)
	})
}
