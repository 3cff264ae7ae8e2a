package upstream_test

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vkubelet/vkubelet/internal/lab/testenv"
)

// Upstream virtual-kubelet's own mock provider, its source unchanged, compiled
// into a vkubelet of its own (package sdk) through the adapter, runs a node: the
// adapter is built with the node's client the SDK hands the provider
// (ProviderConfig.Client; upstream.New refuses to build without one), the node
// is configured as the mock configures it, a pod that takes its environment from
// a ConfigMap (which the adapter's listers watch) reaches Running, and a deleted
// pod goes.
//
// The node runs under its own identity (system:node:<name>, by TLS bootstrap, as
// in a cluster): the adapter's listers read with the node's client, and the
// label the mock sets on its node that NodeRestriction forbids a node to set
// on itself (alpha.service-controller.kubernetes.io/exclude-balancer) is left
// out, so that the node registers.
func TestUpstreamsMockCompiledInThroughTheSDKRunsANode(t *testing.T) {
	const node = "upstream-mock-sdk"
	bin := upstreamMockNode.build(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx := context.Background()

	dir := t.TempDir()
	bootstrap := testenv.NodeBootstrap(t, node)
	stderr := runNode(t, "the node with upstream's mock compiled in", exec.Command(bin, "--provider", "upstream-mock", "--nodename", node, "--address", "127.0.0.1",
		"--bootstrap-kubeconfig", bootstrap, "--kubeconfig", filepath.Join(dir, "node.kubeconfig"),
		"--cert-dir", filepath.Join(dir, "certs"),
		"--kubelet-port", "0", "--self-signed-serving-cert", "--log-level", "debug"), node)

	// The node registers, configured by the mock: its capacity, without the
	// label a node may not set on itself, which the node says it left out (its
	// Ready condition is the mock's own, False: the test does not wait for it).
	const refused = "alpha.service-controller.kubernetes.io/exclude-balancer"
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		pods := n.Status.Capacity[corev1.ResourcePods]
		_, has := n.Labels[refused]
		return pods.Value() == 20 && !has,
			fmt.Sprintf("capacity %s pods, labels %v, want the mock's 20 pods and no %s", pods.String(), n.Labels, refused)
	})
	if !strings.Contains(stderr.String(), refused) {
		t.Errorf("the node did not say it left out %s", refused)
	}

	if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings"},
		Data: map[string]string{"greeting": "hi"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "up"},
		Spec: corev1.PodSpec{NodeName: node, Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{Name: "main", Image: "busybox",
				EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}}}}}}},
	}
	if _, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitPhase(t, ns, "up", corev1.PodRunning)

	if err := c.CoreV1().Pods(ns).Delete(ctx, "up", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		_, err := c.CoreV1().Pods(ns).Get(ctx, "up", metav1.GetOptions{})
		return apierrors.IsNotFound(err), "the pod is still in the API"
	})
}
