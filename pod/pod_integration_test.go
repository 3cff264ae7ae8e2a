package pod_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/lab/controlplane"
	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/pod"
	"github.com/vkubelet/vkubelet/provider"
	"github.com/vkubelet/vkubelet/providers/mock"
)

func TestMain(m *testing.M) {
	// The controller-manager creates the default ServiceAccounts and publishes
	// kube-root-ca.crt, which every pod's kube-api-access volume needs.
	testenv.Main(m, controlplane.Config{ControllerManager: true})
}

// startController runs a pod controller for a node of the test's own (a Node object
// is created for it) with provider prov, until the test ends.
func startController(t *testing.T, prov provider.PodLifecycleHandler) (kubernetes.Interface, string) {
	t.Helper()
	c := testenv.Client(t)
	node := "pods-" + testenv.Namespace(t)
	ctx := context.Background()
	if _, err := c.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.20"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{}) })
	runController(t, pod.Config{Client: c, NodeName: node, Provider: prov,
		StatusPollInterval: 500 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	return c, node
}

// runController runs a pod controller of cfg until the test ends, once it is
// ready.
func runController(t *testing.T, cfg pod.Config) {
	t.Helper()
	ctrl, err := pod.NewController(cfg)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ctrl.Run(runCtx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	select {
	case <-ctrl.Ready():
	case err := <-done:
		t.Fatalf("controller stopped: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("controller not ready")
	}
}

func newMock(t *testing.T, node string) *mock.Provider {
	t.Helper()
	return newMockOf(t, mock.Config{}, node)
}

func newMockOf(t *testing.T, cfg mock.Config, node string) *mock.Provider {
	t.Helper()
	p, err := mock.New(cfg, node, mock.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// providerPodNames are the names of the pods prov runs.
func providerPodNames(t *testing.T, prov *mock.Provider) []string {
	t.Helper()
	pods, err := prov.GetPods(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range pods {
		names = append(names, p.Name)
	}
	return names
}

func createPod(t *testing.T, c kubernetes.Interface, ns, node string, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	p.Spec.NodeName = node
	out, err := c.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// appPod is a pod of one container, "app", that mounts no token, with edit
// applied to its spec.
func appPod(name string, edit func(*corev1.PodSpec)) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{AutomountServiceAccountToken: new(bool),
		Containers: []corev1.Container{{Name: "app", Image: "busybox"}}}}
	if edit != nil {
		edit(&p.Spec)
	}
	return p
}

func getPod(t *testing.T, c kubernetes.Interface, ns, name string) *corev1.Pod {
	t.Helper()
	p, err := c.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func waitRunning(t *testing.T, c kubernetes.Interface, ns, name string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		p := getPod(t, c, ns, name)
		return p.Status.Phase == corev1.PodRunning, fmt.Sprintf("pod %s/%s is %s", ns, name, p.Status.Phase)
	})
}

// secretEnvPod references Secret "later", key "token", from its environment.
func secretEnvPod(name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "busybox", Env: []corev1.EnvVar{{Name: "TOKEN",
			ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "later"}, Key: "token"}}}}}}}}
}

// waitConfigError waits until the pod shows what the kubelet shows for a missing
// Secret: Pending, every container Waiting in CreateContainerConfigError, and a
// Warning Event with upstream virtual-kubelet's reason MandatorySecretNotFound.
func waitConfigError(t *testing.T, c kubernetes.Interface, ns, name string) {
	t.Helper()
	const msg = `secret "later" not found`
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		p := getPod(t, c, ns, name)
		if p.Status.Phase != corev1.PodPending || len(p.Status.ContainerStatuses) != 1 {
			return false, fmt.Sprintf("status %+v", p.Status)
		}
		w := p.Status.ContainerStatuses[0].State.Waiting
		return w != nil && w.Reason == "CreateContainerConfigError" && w.Message == msg, fmt.Sprintf("container state %+v", p.Status.ContainerStatuses[0].State)
	})
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		evs, err := c.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("involvedObject.name", name).String()})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range evs.Items {
			if e.Type == corev1.EventTypeWarning && e.Reason == "MandatorySecretNotFound" && e.Message == "Error: "+msg {
				return true, ""
			}
			seen = append(seen, e.Reason+": "+e.Message)
		}
		return false, fmt.Sprintf("events: %q", seen)
	})
}

func TestPodWaitsForMissingSecretThenStarts(t *testing.T) {
	prov := newMock(t, "")
	c, node := startController(t, prov)
	ns := testenv.Namespace(t)
	createPod(t, c, ns, node, secretEnvPod("waits"))

	waitConfigError(t, c, ns, "waits")
	if n := len(prov.Pods()); n != 0 {
		t.Fatalf("the provider was given %d pods; want none while the Secret is missing", n)
	}

	if _, err := c.CoreV1().Secrets(ns).Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "later"},
		StringData: map[string]string{"token": "abc"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, c, ns, "waits")
	rp := prov.Resolved(ns, "waits")
	if rp == nil || len(rp.Env["app"]) == 0 || rp.Env["app"][0] != (corev1.EnvVar{Name: "TOKEN", Value: "abc"}) {
		t.Fatalf("resolved env = %v, want TOKEN=abc first", rp)
	}
}

// plainProvider hides every optional interface of the mock: a provider that takes
// plain pods.
type plainProvider struct{ provider.PodLifecycleHandler }

func TestPlainProviderPodAlsoWaitsForMissingSecret(t *testing.T) {
	prov := newMock(t, "")
	c, node := startController(t, plainProvider{prov})
	ns := testenv.Namespace(t)
	createPod(t, c, ns, node, secretEnvPod("waits"))
	waitConfigError(t, c, ns, "waits")
	if n := len(prov.Pods()); n != 0 {
		t.Fatalf("the provider was given %d pods; want none while the Secret is missing", n)
	}
	if _, err := c.CoreV1().Secrets(ns).Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "later"},
		StringData: map[string]string{"token": "abc"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, c, ns, "waits")
	if prov.Resolved(ns, "waits") != nil {
		t.Error("a plain provider was given a resolved pod")
	}
}

func TestConfigMapUpdateReachesUpdatePodVolumes(t *testing.T) {
	prov := newMock(t, "")
	c, node := startController(t, prov)
	ns := testenv.Namespace(t)
	ctx := context.Background()
	cm, err := c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings"},
		Data: map[string]string{"mode": "v1"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	createPod(t, c, ns, node, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "mounts"},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "app", Image: "busybox",
				Env:          []corev1.EnvVar{{Name: "MODE", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}, Key: "mode"}}}},
				VolumeMounts: []corev1.VolumeMount{{Name: "settings", MountPath: "/etc/settings"}}}},
			Volumes: []corev1.Volume{{Name: "settings", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}}}}},
		}})
	waitRunning(t, c, ns, "mounts")
	modeFile := func() string {
		rp := prov.Resolved(ns, "mounts")
		if rp == nil || rp.Volumes["settings"] == nil || len(rp.Volumes["settings"].Files) != 1 {
			return ""
		}
		return string(rp.Volumes["settings"].Files[0].Data)
	}
	if got := modeFile(); got != "v1" {
		t.Fatalf("settings/mode = %q, want v1", got)
	}
	if n := prov.VolumeUpdates(ns, "mounts"); n != 0 {
		t.Fatalf("UpdatePodVolumes called %d times before any change", n)
	}

	cm.Data["mode"] = "v2"
	if _, err := c.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		return modeFile() == "v2", fmt.Sprintf("settings/mode = %q after %d volume updates", modeFile(), prov.VolumeUpdates(ns, "mounts"))
	})
	if n := prov.VolumeUpdates(ns, "mounts"); n != 1 {
		t.Errorf("UpdatePodVolumes called %d times, want 1", n)
	}
	// The environment stays as the container started with it, as with the kubelet.
	if env := prov.Resolved(ns, "mounts").Env["app"]; env[0] != (corev1.EnvVar{Name: "MODE", Value: "v1"}) {
		t.Errorf("env after the update = %v, want MODE=v1 first", env)
	}
	// A change that leaves the files alone does not call the provider.
	cm.Labels = map[string]string{"touched": "yes"}
	cm.ResourceVersion = ""
	if _, err := c.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Something else must have happened after the label change for "no call" to
	// mean anything: a second, real change is seen, and counted once.
	cm.Data["mode"] = "v3"
	if _, err := c.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		return modeFile() == "v3", fmt.Sprintf("settings/mode = %q", modeFile())
	})
	if n := prov.VolumeUpdates(ns, "mounts"); n != 2 {
		t.Errorf("UpdatePodVolumes called %d times after two content changes and one label change, want 2", n)
	}
}

func TestProviderTokenIsBoundToThePod(t *testing.T) {
	prov := newMock(t, "")
	c, node := startController(t, prov)
	ns := testenv.Namespace(t)
	ctx := context.Background()
	p := createPod(t, c, ns, node, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "bound"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "busybox"}}}})
	waitRunning(t, c, ns, "bound")
	var tok string
	rp := prov.Resolved(ns, "bound")
	for name, v := range rp.Volumes {
		if strings.HasPrefix(name, "kube-api-access-") {
			for _, f := range v.Files {
				if f.Path == "token" {
					tok = string(f.Data)
				}
			}
		}
	}
	if tok == "" {
		t.Fatalf("no kube-api-access token in the resolved volumes %v", rp.Volumes)
	}
	review := func() *authenticationv1.TokenReviewStatus {
		r, err := c.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
			Spec: authenticationv1.TokenReviewSpec{Token: tok}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return &r.Status
	}
	st := review()
	if !st.Authenticated {
		t.Fatalf("token rejected: %s", st.Error)
	}
	if want := "system:serviceaccount:" + ns + ":default"; st.User.Username != want {
		t.Errorf("username = %q, want %q", st.User.Username, want)
	}
	if got := st.User.Extra["authentication.kubernetes.io/pod-name"]; !reflect.DeepEqual([]string(got), []string{"bound"}) {
		t.Errorf("pod-name = %v, want [bound]", got)
	}
	if got := st.User.Extra["authentication.kubernetes.io/pod-uid"]; !reflect.DeepEqual([]string(got), []string{string(p.UID)}) {
		t.Errorf("pod-uid = %v, want [%s]", got, p.UID)
	}
	if err := c.CoreV1().Pods(ns).Delete(ctx, "bound", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		st := review()
		return !st.Authenticated, "the token of the deleted pod is still accepted"
	})
}
