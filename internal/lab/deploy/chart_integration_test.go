package deploy

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	appsv1 "k8s.io/api/apps/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/vkubelet/vkubelet/internal/lab/controlplane"
	"github.com/vkubelet/vkubelet/internal/lab/crienv"
	"github.com/vkubelet/vkubelet/internal/lab/image"
	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/internal/lab/testenv/nodetest"
)

func TestMain(m *testing.M) {
	// The installs of TestTheChartRunsVkubeletOnAVkubeletNode mostly wait for
	// the cluster: the seven run side by side even where -parallel defaults to
	// GOMAXPROCS (2 on CI's machines), unless -parallel says otherwise.
	if f := flag.Lookup("test.parallel"); f != nil && f.Value.String() != "" {
		if n, err := strconv.Atoi(f.Value.String()); err == nil && n < 7 {
			_ = flag.Set("test.parallel", "7")
		}
	}
	// Deployments need the controller manager (which also signs and approves the
	// node's client certificate), the chart's pod the scheduler, and its token
	// the ServiceAccount admission plugin.
	testenv.Main(m, controlplane.Config{Scheduler: true, ControllerManager: true, ServiceAccountAdmission: true})
}

// chartDir is charts/vkubelet, from this package's directory.
func chartDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../../../charts/vkubelet")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// helmRunner runs the cached helm against the package's control plane, with its
// configuration and caches in the test's own directories.
func helmRunner(t *testing.T) func(args ...string) (string, error) {
	t.Helper()
	cp := testenv.ControlPlane(t)
	bin, err := controlplane.EnsureHelm(context.Background(), os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	return func(args ...string) (string, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, append(args, "--kubeconfig", cp.KubeconfigPath)...)
		cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home+"/cache", "HELM_CONFIG_HOME="+home+"/config", "HELM_DATA_HOME="+home+"/data")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		start := time.Now()
		err := cmd.Run()
		t.Logf("helm %s (%s)", strings.Join(args[:min(2, len(args))], " "), time.Since(start).Round(100*time.Millisecond))
		if err != nil {
			return out.String(), fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, out.String())
		}
		return out.String(), nil
	}
}

// hostAddress is an IPv4 address of this machine other than loopback: the inner
// node's InternalIP (the API server does not proxy to a loopback node address).
func hostAddress(t *testing.T) string {
	t.Helper()
	ifaces, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, ifc := range ifaces {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && ipn.IP.IsGlobalUnicast() {
				return ipn.IP.String()
			}
		}
	}
	t.Fatal("no IPv4 address other than loopback on this machine")
	return ""
}

// The chart lints, and renders what its values say: replicas share the node by
// leader election, and spread a NodeSet's nodes; no replica at all, a bad node name, a value of the wrong type,
// an unknown value and a provider the chart cannot run are refused with a
// message naming the value (the templates' checks and values.schema.json).
func TestTheChartLintsAndRefusesValuesItCannotHonour(t *testing.T) {
	helm := helmRunner(t)
	chart := chartDir(t)
	if out, err := helm("lint", "--strict", chart); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, tc := range []struct{ set, want string }{
		{"replicas=0", "replicas: at least 1"},
		{"nodeName=Not_A_Name", `nodeName "Not_A_Name" is not a valid node name`},
		{"nodes[0].name=n-%d,nodes[0].count=3", "templates (count) are not supported"},
		{"nodes[0].name=Bad_Name", `nodes: "Bad_Name" is not a valid node name`},
		{"kubelet.approveServingCSR=true", "kubelet.approveServingCSR is gone"},
		{"provider.name=cri", "at '/provider/name': value must be one of 'mock', 'kube', 'remote', 'interlink'"},
		{"replicas=two", "at '/replicas': got string, want integer"},
		{"hostNetwork=yes", "at '/hostNetwork': got string, want boolean"},
		{"provider.tokenFile=/t", "at '/provider': additional properties 'tokenFile' not allowed"},
		{"nodName=n1", "additional properties 'nodName' not allowed"},
		{"provider.tlsSecret=Not_A_Secret", "at '/provider/tlsSecret'"},
		{"provider.config.endpoint=x,provider.existingSecret=s", "give the configuration in one of them"},
	} {
		out, err := helm("template", "vk", chart, "--set", tc.set)
		if err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("--set %s: %v, output %q; want an error saying %q", tc.set, err, out, tc.want)
		}
	}
	out, err := helm("template", "vk", chart, "--set", "replicas=3,nodeName=n1")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"replicas: 3", "- --leader-elect", "kind: Role", `resourceNames: ["vkubelet-n1"]`, "type: RollingUpdate"} {
		if !strings.Contains(out, want) {
			t.Errorf("with replicas=3 the chart has no %q", want)
		}
	}
	if strings.Contains(out, "--leader-elect-replicas") {
		t.Error("with one node, the replicas spread it (--leader-elect-replicas)")
	}
	// Replicas of a NodeSet spread its nodes: each holds one of three
	// membership Leases, which the Role and the admission policy name.
	out, err = helm("template", "vk", chart, "--set", "replicas=3,nodes[0].name=n1,nodes[1].name=n2")
	if err != nil {
		t.Fatal(err)
	}
	leases := `["vkubelet-n1", "vkubelet-n2", "vk-vkubelet-replica-0", "vk-vkubelet-replica-1", "vk-vkubelet-replica-2"]`
	for _, want := range []string{"- --leader-elect-replicas=3", "- --leader-elect-group=vk-vkubelet", "resourceNames: " + leases, "object.metadata.name in " + leases} {
		if !strings.Contains(out, want) {
			t.Errorf("with replicas=3 and two nodes the chart has no %q", want)
		}
	}
	out, err = helm("template", "vk", chart, "--set", "metrics.podMonitor.enabled=true,nodeName=n1")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "kind: PodMonitor") || !strings.Contains(out, `resourceNames: ["n1"]`) {
		t.Errorf("with metrics.podMonitor.enabled: no PodMonitor, or its scraper not confined to nodes/metrics of n1:\n%s", out)
	}
}

// The chart mounts what each provider's configuration refers to, at the paths
// values.yaml and docs/DEPLOYING.md promise, read-only and readable by the pod's
// group alone; the sidecar shares the node's socket directory and runs as
// confined as the node, and the node is pointed at its socket by default.
func TestTheChartMountsWhatTheProvidersNeed(t *testing.T) {
	helm := helmRunner(t)
	out, err := helm("template", "vk", chartDir(t), "--skip-tests", "--set",
		"provider.name=remote,provider.kubeconfigSecret=kc,provider.tlsSecret=tls,provider.tokenSecret=tok,providerSidecar.enabled=true,providerSidecar.secret=side")
	if err != nil {
		t.Fatal(err)
	}
	var dep appsv1.Deployment
	var cm corev1.ConfigMap
	for _, doc := range strings.Split(out, "\n---\n") {
		switch {
		case strings.Contains(doc, "\nkind: Deployment\n") && strings.Contains(doc, "\n  name: vk-vkubelet\n"):
			if err := yaml.Unmarshal([]byte(doc), &dep); err != nil {
				t.Fatal(err)
			}
		case strings.Contains(doc, "\nkind: ConfigMap\n"):
			if err := yaml.Unmarshal([]byte(doc), &cm); err != nil {
				t.Fatal(err)
			}
		}
	}
	spec := dep.Spec.Template.Spec
	if len(spec.Containers) != 2 || spec.Containers[0].Name != "vkubelet" || spec.Containers[1].Name != "provider" {
		t.Fatalf("containers %v, want vkubelet and the provider sidecar", spec.Containers)
	}
	mounts := func(c corev1.Container) map[string]corev1.VolumeMount {
		m := map[string]corev1.VolumeMount{}
		for _, vm := range c.VolumeMounts {
			m[vm.MountPath] = vm
		}
		return m
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = v
	}
	node, sidecar := mounts(spec.Containers[0]), mounts(spec.Containers[1])
	for _, tc := range []struct {
		mounts         map[string]corev1.VolumeMount
		dir, secret    string
		files          []string
		readOnly       bool
		sharedEmptyDir bool
	}{
		{mounts: node, dir: "/etc/vkubelet/target", secret: "kc", files: []string{"kubeconfig"}, readOnly: true},
		{mounts: node, dir: "/etc/vkubelet/tls", secret: "tls", files: []string{"ca.crt", "tls.crt", "tls.key"}, readOnly: true},
		{mounts: node, dir: "/etc/vkubelet/token", secret: "tok", files: []string{"token"}, readOnly: true},
		{mounts: sidecar, dir: "/etc/vkubelet/sidecar", secret: "side", readOnly: true},
		{mounts: node, dir: "/run/vkubelet-provider", sharedEmptyDir: true},
		{mounts: sidecar, dir: "/run/vkubelet-provider", sharedEmptyDir: true},
	} {
		vm, ok := tc.mounts[tc.dir]
		if !ok {
			t.Errorf("nothing mounted at %s", tc.dir)
			continue
		}
		if vm.ReadOnly != tc.readOnly {
			t.Errorf("%s: readOnly %v, want %v", tc.dir, vm.ReadOnly, tc.readOnly)
		}
		v := volumes[vm.Name]
		if tc.sharedEmptyDir {
			if v.EmptyDir == nil || vm.Name != "provider-socket" {
				t.Errorf("%s: volume %s is not the shared emptyDir: %+v", tc.dir, vm.Name, v.VolumeSource)
			}
			continue
		}
		if v.Secret == nil || v.Secret.SecretName != tc.secret || v.Secret.DefaultMode == nil || *v.Secret.DefaultMode != 0o440 {
			t.Errorf("%s: volume %+v, want Secret %s with mode 0440", tc.dir, v.VolumeSource, tc.secret)
			continue
		}
		var files []string
		for _, it := range v.Secret.Items {
			files = append(files, it.Path)
		}
		if strings.Join(files, ",") != strings.Join(tc.files, ",") {
			t.Errorf("%s: files %v, want %v", tc.dir, files, tc.files)
		}
	}
	sc := spec.Containers[1].SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || len(sc.Capabilities.Add) > 0 || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
		t.Errorf("the sidecar's securityContext %+v: want a read-only root, no privilege escalation, every capability dropped", sc)
	}
	if ps := spec.SecurityContext; ps == nil || ps.RunAsNonRoot == nil || !*ps.RunAsNonRoot || ps.RunAsUser == nil || *ps.RunAsUser != 65532 {
		t.Errorf("the pod's securityContext %+v: want non-root 65532", ps)
	}
	// The bootstrap token is the node's alone: no token in the sidecar.
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Errorf("the pod's automountServiceAccountToken is %v: the sidecar would get the node's bootstrap token", spec.AutomountServiceAccountToken)
	}
	if vm, ok := node["/var/run/secrets/kubernetes.io/serviceaccount"]; !ok || !vm.ReadOnly || volumes[vm.Name].Projected == nil {
		t.Errorf("the node's container has no read-only projected token at the ServiceAccount's path: %+v", vm)
	}
	for path := range sidecar {
		if strings.HasPrefix(path, "/var/run/secrets") {
			t.Errorf("the sidecar mounts %s", path)
		}
	}
	if args := strings.Join(spec.Containers[1].Args, " "); args != "provider serve --provider=mock --nodename=vkubelet --listen=unix:///run/vkubelet-provider/provider.sock" {
		t.Errorf("the sidecar's args %q: want the mock served on the shared socket", args)
	}
	if got, want := cm.Data["provider-config.json"], `{"endpoint":"unix:///run/vkubelet-provider/provider.sock"}`; got != want {
		t.Errorf("provider-config.json is %q, want %q (the sidecar's socket)", got, want)
	}
}

// deploy/vkubelet.yaml is the chart rendered with its defaults, without its
// hooks (make manifests): neither helm test's nor the uninstall's, which
// kubectl apply would run at once.
func TestThePlainManifestsAreTheChartsRendering(t *testing.T) {
	helm := helmRunner(t)
	want, err := helm("template", "vkubelet", chartDir(t), "--namespace", "vkubelet-system", "--no-hooks")
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../../../deploy/vkubelet.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(string(got), want) {
		t.Errorf("deploy/vkubelet.yaml is not the chart's rendering: run make manifests")
	}
}

// host is the vkubelet CRI node the chart's pods run on, with vkubelet's image
// imported into its containerd: one for the package's installs, which run side
// by side on it.
type host struct {
	name string
	tag  string
	env  *crienv.Env

	kubectlOnce sync.Once
	kubectlRef  string
}

// startHost builds vkubelet's image and runs the CRI node until t ends.
func startHost(t *testing.T) *host {
	t.Helper()
	testenv.Require(t, crienv.Available())
	h := &host{name: "dogfood-host", tag: "v0.0.0-dogfood"}
	ctx := context.Background()
	module, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	img, err := image.Build(ctx, image.Options{ModuleDir: module, Version: h.tag, Created: time.Unix(0, 0)})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("vkubelet's image built (%s)", time.Since(start).Round(100*time.Millisecond))
	archive := filepath.Join(t.TempDir(), "image.tar")
	if err := image.WriteArchive(uncompressed(t, img), image.DefaultRepository+":"+h.tag, archive); err != nil {
		t.Fatal(err)
	}
	h.env, err = crienv.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.env.Stop)
	if _, err := h.env.ImportImage(ctx, archive); err != nil {
		t.Fatal(err)
	}
	t.Logf("vkubelet's image built and imported (%s)", time.Since(start).Round(100*time.Millisecond))
	nodetest.Run(t, nodetest.CRIConfig(t, h.name, h.env))
	return h
}

// uncompressed is img with its layers stored as they are, for an import into
// the host's containerd: gzip, race-instrumented, took 28 s over kubectl's
// 62 MB (1.5 s without the race detector), and an image is compressed to be
// written. The files and the configuration are img's.
func uncompressed(t *testing.T, img v1.Image) v1.Image {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	out := empty.Image
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		if out, err = mutate.AppendLayers(out, static.NewLayer(b, types.OCIUncompressedLayer)); err != nil {
			t.Fatal(err)
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if out, err = mutate.ConfigFile(out, cf); err != nil {
		t.Fatal(err)
	}
	return out
}

// importKubectl imports helm test's image into h's containerd, once for the
// installs that run helm test side by side, and returns its name.
func (h *host) importKubectl(t *testing.T) string {
	t.Helper()
	h.kubectlOnce.Do(func() { h.kubectlRef = h.importKubectlImage(t) })
	if h.kubectlRef == "" {
		t.Fatal("helm test's image could not be imported (see the first test that tried)")
	}
	return h.kubectlRef
}

func (h *host) importKubectlImage(t *testing.T) string {
	t.Helper()
	start := time.Now()
	ref := "registry.k8s.io/kubectl:" + h.tag
	archive := filepath.Join(t.TempDir(), "kubectl.tar")
	if err := image.WriteArchive(kubectlImage(t), ref, archive); err != nil {
		t.Fatal(err)
	}
	if _, err := h.env.ImportImage(context.Background(), archive); err != nil {
		t.Fatal(err)
	}
	t.Logf("kubectl's image imported (%s)", time.Since(start).Round(100*time.Millisecond))
	return ref
}

// kubectlImage is helm test's image: the control plane's kubectl (static) as
// its entrypoint, in the place of registry.k8s.io/kubectl, its one layer
// uncompressed (as uncompressed says why).
func kubectlImage(t *testing.T) v1.Image {
	t.Helper()
	bin, err := os.ReadFile(testenv.ControlPlane(t).Binaries.Kubectl)
	if err != nil {
		t.Fatal(err)
	}
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "kubectl", Mode: 0o755, Size: int64(len(bin))}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(bin); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, static.NewLayer(layer.Bytes(), types.OCIUncompressedLayer))
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config.Entrypoint = []string{"/kubectl"}
	cf.Config.User = fmt.Sprintf("%d:%d", image.NonRoot, image.NonRoot)
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	return img
}

// values are the chart's values for a release running node on h. The host is
// started without kube-proxy and cluster DNS (internal/lab/clusternet, which the
// test leaves out to stay quick), so its pods reach no Service: the release's
// pods run in the host's network and are told the API server's address.
func (h *host) values(t *testing.T, node string) map[string]any {
	t.Helper()
	return map[string]any{
		"nodeName":    node,
		"image":       map[string]any{"tag": h.tag, "pullPolicy": "Never"},
		"apiServer":   testenv.ControlPlane(t).URL,
		"hostNetwork": true,
		"kubelet":     map[string]any{"port": testenv.FreePort(t), "address": hostAddress(t)},
		"healthzPort": testenv.FreePort(t),
		"approver":    map[string]any{"healthzPort": testenv.FreePort(t)},
		"nodeSelector": map[string]string{
			"kubernetes.io/hostname": h.name,
		},
		"tolerations": []map[string]string{{"key": "virtual-kubelet.io/provider", "operator": "Exists"}},
		"extraArgs":   []string{"--node-lease-duration=10s", "--node-lease-renew-interval=2s", "--status-poll-interval=1s"},
	}
}

// install installs the chart as release in ns with values, waits for its pods
// and returns the values' file. The release is uninstalled and its node
// deleted when t ends.
func install(t *testing.T, helm func(...string) (string, error), ns, release string, values map[string]any) string {
	t.Helper()
	return installChart(t, helm, ns, release, chartDir(t), values)
}

// installChart is install of chart (a directory, or an OCI reference followed by
// helm's arguments for it, such as --version).
func installChart(t *testing.T, helm func(...string) (string, error), ns, release, chart string, values map[string]any, chartArgs ...string) string {
	t.Helper()
	c := testenv.Client(t)
	valuesFile := filepath.Join(t.TempDir(), "values.yaml")
	b, err := yaml.Marshal(values)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(valuesFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	node := values["nodeName"].(string)
	t.Cleanup(func() { _ = c.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{}) })
	// Without the uninstall's hook: draining the node here would only cost
	// time (up to a minute on a busy machine); the tests of the hook run it.
	t.Cleanup(func() { _, _ = helm("uninstall", release, "--namespace", ns, "--ignore-not-found", "--no-hooks") })
	args := append([]string{"install", release, chart}, chartArgs...)
	if out, err := helm(append(args, "--namespace", ns, "-f", valuesFile, "--wait", "--timeout", "4m")...); err != nil {
		describe(t, c, ns, node)
		t.Fatalf("%v\n%s", err, out)
	}
	return valuesFile
}

// The chart installs vkubelet with each provider that runs in a pod, on a
// vkubelet CRI node, side by side: vkubelet runs vkubelet.
func TestTheChartRunsVkubeletOnAVkubeletNode(t *testing.T) {
	testenv.ControlPlane(t) // skipped under -short before building anything
	h := startHost(t)
	t.Run("mock", func(t *testing.T) { t.Parallel(); testDogfood(t, h) })
	t.Run("kube", func(t *testing.T) { t.Parallel(); testKubeProvider(t, h) })
	t.Run("remote-over-tls", func(t *testing.T) { t.Parallel(); testRemoteProviderOverTLS(t, h) })
	t.Run("remote-on-the-sidecars-socket", func(t *testing.T) { t.Parallel(); testRemoteProviderOnTheSidecarsSocket(t, h) })
	t.Run("interlink-with-a-token", func(t *testing.T) { t.Parallel(); testInterLinkWithAToken(t, h) })
	t.Run("released", func(t *testing.T) { t.Parallel(); testTheReleaseFromItsRegistry(t, h) })
	t.Run("upgraded-from-the-previous-version", func(t *testing.T) { t.Parallel(); testUpgradeFromThePreviousVersion(t, h) })
	t.Run("uninstall-removes-the-nodes", func(t *testing.T) { t.Parallel(); testUninstallRemovesTheNodes(t, h) })
	t.Run("uninstall-stops-the-pods-in-the-provider-first", func(t *testing.T) { t.Parallel(); testUninstallStopsThePodsInTheProviderFirst(t, h) })
}

// The dogfood test: the chart installs vkubelet's image on a vkubelet CRI node;
// that pod bootstraps its node identity with its ServiceAccount and registers a
// second virtual node (mock provider), which `helm test` finds Ready and running
// a pod; a pod of ours reaches Running there and serves logs and exec through it.
// An upgrade restarts the node process and the node comes back; an uninstall
// removes everything the chart made.
func testDogfood(t *testing.T, h *host) {
	helm := helmRunner(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t)
	ctx := context.Background()
	const inner = "dogfood-inner"

	values := h.values(t, inner)
	values["tests"] = map[string]any{"image": h.importKubectl(t), "probeImage": h.env.Pause, "timeoutSeconds": 90}
	chart := chartDir(t)
	release := "dogfood"
	valuesFile := install(t, helm, ns, release, values)
	testenv.WaitNodeReady(t, c, inner, 2*time.Minute)
	// The node is system:node:dogfood-inner: its client certificate came from a
	// CSR its ServiceAccount sent, its serving certificate from a CSR the node
	// sent, both approved by the chart's approver.
	sa := "system:serviceaccount:" + ns + ":" + release + "-vkubelet"
	checkIssuedByTheApprover(t, c, sa, inner)

	// helm test: its pods find the node Ready and a pod running on it, with a
	// ServiceAccount of their own, all deleted once they pass.
	if out, err := helm("test", release, "--namespace", ns, "--timeout", "3m"); err != nil {
		describe(t, c, ns, inner)
		t.Fatalf("%v\n%s", err, out)
	}
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component in (test, test-probe)"})
		if err != nil {
			return false, err.Error()
		}
		sas, err := c.CoreV1().ServiceAccounts(ns).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + release + "-vkubelet-test"})
		if err != nil {
			return false, err.Error()
		}
		return len(pods.Items) == 0 && len(sas.Items) == 0, fmt.Sprintf("%d test pods and %d test ServiceAccounts left after helm test passed", len(pods.Items), len(sas.Items))
	})

	// A thief holding the node pod's token can obtain no other node's
	// certificates, nor ask for any other signer's.
	stolen := testenv.TokenClient(t, ns, release+"-vkubelet")
	testenv.CheckCannotBecomeAnotherNode(t, stolen, "victim-node", "10.9.9.9")
	if _, err := testenv.TryAskForNodeCertificate(t, stolen, certificatesv1.KubeAPIServerClientSignerName, "victim-node"); err == nil ||
		!strings.Contains(err.Error(), "may ask only for node client certificates") {
		t.Errorf("the node's account asking for a kube-apiserver-client certificate: %v, want the admission policy's refusal", err)
	}
	checkApproverConfined(t, c, testenv.TokenClient(t, ns, release+"-vkubelet-approver"))

	// A pod on the inner node, scheduled there by the scheduler.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "inner-pod"},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{"kubernetes.io/hostname": inner},
			Tolerations:  []corev1.Toleration{{Key: "virtual-kubelet.io/provider", Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{Name: "main", Image: "busybox",
				Args: []string{"hello-from-the-inner-node"},
				Env:  []corev1.EnvVar{{Name: "GREETING", Value: "dogfood"}}}},
		},
	}
	if _, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, c, ns, pod.Name, inner)
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		b, err := c.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
		return err == nil && strings.Contains(string(b), "hello-from-the-inner-node"), fmt.Sprintf("logs through the inner node: %q, %v", b, err)
	})
	if out, err := testenv.Exec(t, ns, pod.Name, "main", "env"); err != nil || !strings.Contains(out, "GREETING=dogfood") {
		t.Errorf("exec through the inner node: %q, %v", out, err)
	}
	if uid := processUID(t, "--nodename="+inner); uid != strconv.Itoa(image.NonRoot) {
		t.Errorf("the inner node's process runs as uid %s, want %d", uid, image.NonRoot)
	}

	// An upgrade with another flag and a NodeSet of three names restarts the
	// node process (Recreate); the node comes back with two more, its pod runs
	// again, and the approver issues exactly those three names.
	before := chartPod(t, c, ns, release)
	if out, err := helm("upgrade", release, chart, "--namespace", ns, "-f", valuesFile,
		"--set", "extraArgs={--node-lease-duration=10s,--node-lease-renew-interval=2s,--status-poll-interval=1s,--log-level=debug}",
		"--set", "nodes[0].name="+inner+",nodes[1].name="+inner+"-b,nodes[2].name="+inner+"-c",
		"--wait", "--timeout", "4m"); err != nil {
		describe(t, c, ns, inner)
		t.Fatalf("%v\n%s", err, out)
	}
	if after := chartPod(t, c, ns, release); after.UID == before.UID || !strings.Contains(strings.Join(after.Spec.Containers[0].Args, " "), "--log-level=debug") {
		t.Errorf("after the upgrade the node's pod is %s with args %q (before: %s)", after.UID, after.Spec.Containers[0].Args, before.UID)
	}
	for _, n := range []string{inner, inner + "-b", inner + "-c"} {
		t.Cleanup(func() { _ = c.CoreV1().Nodes().Delete(context.Background(), n, metav1.DeleteOptions{}) })
		testenv.WaitNodeReady(t, c, n, 2*time.Minute)
		checkIssuedByTheApprover(t, c, sa, n)
	}
	testenv.CheckCannotBecomeAnotherNode(t, stolen, inner+"-d", "10.9.9.9")
	waitRunning(t, c, ns, pod.Name, inner)

	// Uninstall: nothing the chart made is left.
	if out, err := helm("uninstall", release, "--namespace", ns, "--wait", "--timeout", "2m"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	selector := metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + release}
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		var left []string
		// Typed clients return an empty list with an error.
		collect := func(kind string, n int, err error) {
			if err != nil {
				left = append(left, kind+": "+err.Error())
			} else if n > 0 {
				left = append(left, fmt.Sprintf("%d %s", n, kind))
			}
		}
		pods, err := c.CoreV1().Pods(ns).List(ctx, selector)
		collect("pods", len(pods.Items), err)
		deps, err := c.AppsV1().Deployments(ns).List(ctx, selector)
		collect("deployments", len(deps.Items), err)
		cms, err := c.CoreV1().ConfigMaps(ns).List(ctx, selector)
		collect("configmaps", len(cms.Items), err)
		sas, err := c.CoreV1().ServiceAccounts(ns).List(ctx, selector)
		collect("serviceaccounts", len(sas.Items), err)
		crs, err := c.RbacV1().ClusterRoles().List(ctx, selector)
		collect("clusterroles", len(crs.Items), err)
		crbs, err := c.RbacV1().ClusterRoleBindings().List(ctx, selector)
		collect("clusterrolebindings", len(crbs.Items), err)
		roles, err := c.RbacV1().Roles(metav1.NamespaceDefault).List(ctx, selector)
		collect("roles in default", len(roles.Items), err)
		vaps, err := c.AdmissionregistrationV1().ValidatingAdmissionPolicies().List(ctx, selector)
		collect("validatingadmissionpolicies", len(vaps.Items), err)
		return len(left) == 0, "left after helm uninstall: " + strings.Join(left, ", ")
	})
}

// checkIssuedByTheApprover checks that node's client certificate was asked for
// by the bootstrap account sa, its serving certificate by the node itself, and
// that the chart's approver approved both.
func checkIssuedByTheApprover(t *testing.T, c kubernetes.Interface, sa, node string) {
	t.Helper()
	want := map[string]string{
		certificatesv1.KubeAPIServerClientKubeletSignerName: sa,
		certificatesv1.KubeletServingSignerName:             "system:node:" + node,
	}
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		csrs, err := c.CertificatesV1().CertificateSigningRequests().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		found := map[string]bool{}
		for _, csr := range csrs.Items {
			if len(csr.Status.Certificate) == 0 || want[csr.Spec.SignerName] != csr.Spec.Username || !asksFor(csr, node) {
				continue
			}
			for _, cond := range csr.Status.Conditions {
				found[csr.Spec.SignerName] = found[csr.Spec.SignerName] || cond.Type == certificatesv1.CertificateApproved && cond.Reason == "VkubeletApproved"
			}
		}
		return len(found) == 2 && found[certificatesv1.KubeAPIServerClientKubeletSignerName] && found[certificatesv1.KubeletServingSignerName],
			fmt.Sprintf("certificates of node %s approved by the chart's approver: %v", node, found)
	})
}

// checkApproverConfined checks what a thief holding the approver's token
// (approver) can do: ask for no certificate at all, and approve no CSR of
// another signer than the two node signers (a user's client certificate, here,
// which an admin's client asked for).
func checkApproverConfined(t *testing.T, admin, approver kubernetes.Interface) {
	t.Helper()
	if _, err := testenv.TryAskForNodeCertificate(t, approver, certificatesv1.KubeAPIServerClientKubeletSignerName, "victim-node"); !apierrors.IsForbidden(err) {
		t.Errorf("the approver's account asking for a node identity: %v, want Forbidden", err)
	}
	name := testenv.AskForNodeCertificate(t, admin, certificatesv1.KubeAPIServerClientSignerName, "victim-node")
	t.Cleanup(func() {
		_ = admin.CertificatesV1().CertificateSigningRequests().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	csr, err := approver.CertificatesV1().CertificateSigningRequests().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "Thief"})
	if _, err := approver.CertificatesV1().CertificateSigningRequests().UpdateApproval(context.Background(), name, csr, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the approver's account approving a kube-apiserver-client CSR: %v, want Forbidden", err)
	}
}

// asksFor reports whether csr asks for a certificate of node.
func asksFor(csr certificatesv1.CertificateSigningRequest, node string) bool {
	block, _ := pem.Decode(csr.Spec.Request)
	if block == nil {
		return false
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	return err == nil && req.Subject.CommonName == "system:node:"+node
}

func waitRunning(t *testing.T, c kubernetes.Interface, ns, name, node string) {
	t.Helper()
	testenv.Eventually(t, 2*time.Minute, func() (bool, string) {
		p, err := c.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Spec.NodeName == node && p.Status.Phase == corev1.PodRunning,
			fmt.Sprintf("pod %s on %q: %s %s", name, p.Spec.NodeName, p.Status.Phase, p.Status.Message)
	})
}

// chartPod is the release's one node pod.
func chartPod(t *testing.T, c kubernetes.Interface, ns, release string) *corev1.Pod {
	t.Helper()
	pods, err := c.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/instance=" + release + ",app.kubernetes.io/component=node"})
	if err != nil {
		t.Fatal(err)
	}
	var running []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			running = append(running, p)
		}
	}
	if len(running) != 1 {
		t.Fatalf("%d pods of release %s, want 1", len(running), release)
	}
	return &running[0]
}

// processUID is the user ID of the process whose command line contains arg.
func processUID(t *testing.T, arg string) string {
	t.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(b, []byte(arg)) || !bytes.HasPrefix(b, []byte(image.Binary+"\x00")) {
			continue
		}
		status, err := os.ReadFile(filepath.Join(filepath.Dir(p), "status"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(status), "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" {
				return f[1]
			}
		}
	}
	t.Fatalf("no process %s with %s", image.Binary, arg)
	return ""
}

// describe logs the namespace's pods and events, for a failed install of node.
func describe(t *testing.T, c kubernetes.Interface, ns, node string) {
	t.Helper()
	if pods, err := c.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{}); err == nil {
		for _, p := range pods.Items {
			b, _ := yaml.Marshal(p.Status)
			t.Logf("pod %s on %q:\n%s", p.Name, p.Spec.NodeName, b)
			for _, ctr := range p.Spec.Containers {
				tail := int64(20)
				logs, err := c.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: ctr.Name, TailLines: &tail}).DoRaw(context.Background())
				t.Logf("pod %s, container %s, its log's end (%v):\n%s", p.Name, ctr.Name, err, logs)
			}
		}
	}
	if evs, err := c.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{}); err == nil {
		for _, e := range evs.Items {
			t.Logf("event %s %s/%s: %s", e.Reason, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Message)
		}
	}
	if _, err := c.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		t.Logf("node %s was never registered", node)
	}
}
