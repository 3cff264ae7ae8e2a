package agent_test

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/provider"
	"github.com/vkubelet/vkubelet/providers/mock"
)

// heapInuse is the heap in use after two collections.
func heapInuse() uint64 {
	runtime.GC()
	runtime.GC()
	debug.FreeOSMemory()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// TestUnrelatedConfigMapsAndSecretsLeaveTheAgentIdle measures the heap of an
// in-process node that runs a pod referencing a ConfigMap and a Secret, before and
// after 5,000 ConfigMaps and 5,000 Secrets (1 KiB each) are created in ten other
// namespaces, and, for scale, with a cluster-wide ConfigMap and Secret informer (what
// a naive resolver would run) added to the same process.
func TestUnrelatedConfigMapsAndSecretsLeaveTheAgentIdle(t *testing.T) {
	const node = "vk-memory"
	_, prov := startNode(t, node, mock.Config{})
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx := context.Background()

	cm, err := c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "conf"},
		Data: map[string]string{"k": "v1"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sec"},
		StringData: map[string]string{"k": "s"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = c.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "app"},
		Spec: corev1.PodSpec{NodeName: node, Tolerations: tolerateVirtualNode(),
			Containers: []corev1.Container{{Name: "c", Image: "busybox",
				Env: []corev1.EnvVar{{Name: "S", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: "sec"}, Key: "k"}}}},
				VolumeMounts: []corev1.VolumeMount{{Name: "conf", MountPath: "/conf"}}}},
			Volumes: []corev1.Volume{{Name: "conf", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "conf"}}}}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		return running(podsOn(ctx, c, ns), node) == 1, "pod not Running yet"
	})
	idle := heapInuse()

	var others []string
	for range 10 {
		others = append(others, testenv.Namespace(t))
	}
	payload := strings.Repeat("x", 1024)
	const perKind = 5000
	jobs := make(chan int)
	var wg sync.WaitGroup
	var errOnce sync.Once
	var firstErr error
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				other := others[i%len(others)]
				name := fmt.Sprintf("unrelated-%d", i)
				_, err := c.CoreV1().ConfigMaps(other).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name},
					Data: map[string]string{"data": payload}}, metav1.CreateOptions{})
				if err == nil {
					_, err = c.CoreV1().Secrets(other).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name},
						StringData: map[string]string{"data": payload}}, metav1.CreateOptions{})
				}
				if err != nil {
					errOnce.Do(func() { firstErr = err })
				}
			}
		}()
	}
	for i := range perKind {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	if firstErr != nil {
		t.Fatal(firstErr)
	}
	// The node's watches are caught up once a change made after all of that has
	// reached the provider.
	cm.Data["k"] = "v2"
	if _, err := c.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		return prov.VolumeUpdates(ns, "app") == 1, "the ConfigMap change has not reached the provider"
	})
	loaded := heapInuse()

	// For scale: the cost of caching every ConfigMap and Secret of the cluster.
	infCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	factory := informers.NewSharedInformerFactory(c, 0)
	factory.Core().V1().ConfigMaps().Informer()
	factory.Core().V1().Secrets().Informer()
	factory.Start(infCtx.Done())
	factory.WaitForCacheSync(infCtx.Done())
	clusterWide := heapInuse()
	cancel()
	factory.Shutdown()

	t.Logf("heap in use: idle %.1f MiB; with %d unrelated ConfigMaps and %d Secrets %.1f MiB (%+.1f MiB); plus cluster-wide informers %.1f MiB (%+.1f MiB)",
		mib(idle), perKind, perKind, mib(loaded), mib(loaded)-mib(idle), mib(clusterWide), mib(clusterWide)-mib(loaded))
	if grow, naive := int64(loaded)-int64(idle), int64(clusterWide)-int64(loaded); grow > naive/4 {
		t.Errorf("the agent grew by %.1f MiB with unrelated objects, more than a quarter of what caching them all costs (%.1f MiB)",
			float64(grow)/(1<<20), float64(naive)/(1<<20))
	}
}

// execOut runs cmd in the mock's container and returns its stdout.
func execOut(t *testing.T, prov *mock.Provider, ns, pod, container string, cmd ...string) string {
	t.Helper()
	out := &testenv.Buffer{}
	if err := prov.RunInContainer(context.Background(), ns, pod, container, cmd, &stdoutOnly{out}); err != nil {
		t.Fatalf("exec %q: %v", cmd, err)
	}
	return out.String()
}

type stdoutOnly struct{ out *testenv.Buffer }

func (s *stdoutOnly) Stdin() io.Reader                 { return nil }
func (s *stdoutOnly) Stdout() io.WriteCloser           { return s.out }
func (s *stdoutOnly) Stderr() io.WriteCloser           { return nil }
func (s *stdoutOnly) TTY() bool                        { return false }
func (s *stdoutOnly) Resize() <-chan provider.TermSize { return nil }

// TestNodeHandsResolvedPodsToTheMock runs a pod through a whole node and reads its
// resolved environment and files back with the mock's scripted `env` and `cat`.
func TestNodeHandsResolvedPodsToTheMock(t *testing.T) {
	const node = "vk-resolve"
	_, prov := startNode(t, node, mock.Config{})
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx := context.Background()
	if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "conf"},
		Data: map[string]string{"greeting": "hello"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := c.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "app"},
		Spec: corev1.PodSpec{NodeName: node, Tolerations: tolerateVirtualNode(), EnableServiceLinks: ptr.To(false),
			Containers: []corev1.Container{{Name: "c", Image: "busybox",
				Env: []corev1.EnvVar{
					{Name: "GREETING", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
						LocalObjectReference: corev1.LocalObjectReference{Name: "conf"}, Key: "greeting"}}},
					{Name: "MSG", Value: "$(GREETING), $(POD)"},
					{Name: "POD", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
				},
				VolumeMounts: []corev1.VolumeMount{{Name: "conf", MountPath: "/etc/conf"}}}},
			Volumes: []corev1.Volume{{Name: "conf", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "conf"}}}}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		return running(podsOn(ctx, c, ns), node) == 1, "pod not Running yet"
	})
	want := "GREETING=hello\nMSG=hello, $(POD)\nPOD=app\n" +
		"KUBERNETES_SERVICE_HOST=10.0.0.1\nKUBERNETES_SERVICE_PORT=443\nKUBERNETES_SERVICE_PORT_HTTPS=443\n" +
		"KUBERNETES_PORT=tcp://10.0.0.1:443\nKUBERNETES_PORT_443_TCP=tcp://10.0.0.1:443\nKUBERNETES_PORT_443_TCP_PROTO=tcp\n" +
		"KUBERNETES_PORT_443_TCP_PORT=443\nKUBERNETES_PORT_443_TCP_ADDR=10.0.0.1\n"
	if got := execOut(t, prov, ns, "app", "c", "env"); got != want {
		t.Errorf("env:\n%s\nwant:\n%s", got, want)
	}
	if got := execOut(t, prov, ns, "app", "c", "cat", "/etc/conf/greeting"); got != "hello" {
		t.Errorf("cat /etc/conf/greeting = %q, want hello", got)
	}
	if got := execOut(t, prov, ns, "app", "c", "cat", "/var/run/secrets/kubernetes.io/serviceaccount/namespace"); got != ns {
		t.Errorf("service-account namespace file = %q, want %q", got, ns)
	}
}
