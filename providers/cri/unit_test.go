package cri

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/vkubelet/vkubelet/provider"
)

func TestAuthsForMatchesTheImageRegistry(t *testing.T) {
	creds := []provider.RegistryCredential{
		{Registry: "https://index.docker.io/v1/", Username: "hub"},
		{Registry: "registry.example:5000", Auth: "dXNlcjpwYXNz"}, // user:pass
		{Registry: "registry.example:5000/team", Username: "team"},
	}
	cases := []struct {
		image string
		users []string // "" for anonymous
	}{
		{"busybox", []string{"hub", ""}},
		{"library/busybox:1", []string{"hub", ""}},
		{"registry.example:5000/team/app", []string{"user", "team", ""}},
		{"registry.example:5000/other/app", []string{"user", ""}},
		{"elsewhere.example/app", []string{""}},
	}
	for _, c := range cases {
		var users []string
		for _, a := range authsFor(c.image, creds) {
			if a == nil {
				users = append(users, "")
			} else {
				users = append(users, a.Username)
			}
		}
		if !reflect.DeepEqual(users, c.users) {
			t.Errorf("authsFor(%s) users = %q, want %q", c.image, users, c.users)
		}
	}
}

func TestPullPolicyDefaults(t *testing.T) {
	for image, want := range map[string]corev1.PullPolicy{
		"busybox":              corev1.PullAlways,
		"busybox:latest":       corev1.PullAlways,
		"busybox:1.36":         corev1.PullIfNotPresent,
		"host:5000/busybox":    corev1.PullAlways,
		"host:5000/busybox:1":  corev1.PullIfNotPresent,
		"busybox@sha256:abcd0": corev1.PullIfNotPresent,
	} {
		if got := pullPolicy(&corev1.Container{Image: image}); got != want {
			t.Errorf("pullPolicy(%s) = %s, want %s", image, got, want)
		}
	}
}

func TestResourcesConvertLikeTheKubelet(t *testing.T) {
	c := &corev1.Container{Resources: corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1500m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
	}}
	r := resources(&corev1.Pod{}, c)
	if r.CpuShares != 256 || r.CpuPeriod != 100000 || r.CpuQuota != 150000 || r.MemoryLimitInBytes != 128<<20 {
		t.Errorf("resources = %+v", r)
	}
	if r := resources(&corev1.Pod{}, &corev1.Container{}); r.CpuShares != 2 || r.CpuQuota != 0 || r.MemoryLimitInBytes != 0 {
		t.Errorf("best-effort resources = %+v", r)
	}
	// Under pod-level limits a container without its own runs under the pod's;
	// one with its own keeps them.
	plr := &corev1.Pod{Spec: corev1.PodSpec{Resources: &corev1.ResourceRequirements{
		Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("80m"), corev1.ResourceMemory: resource.MustParse("95Mi")},
	}}}
	if r := resources(plr, &corev1.Container{}); r.CpuShares != 2 || r.CpuQuota != 8000 || r.CpuPeriod != 100000 || r.MemoryLimitInBytes != 95<<20 {
		t.Errorf("resources under pod-level limits = %+v", r)
	}
	if r := resources(plr, c); r.CpuQuota != 150000 || r.MemoryLimitInBytes != 128<<20 {
		t.Errorf("a container's own limits under pod-level ones = %+v", r)
	}
}

func TestLoadConfigDefaultsAndRejectsUnknownFields(t *testing.T) {
	cfg, err := LoadConfig("")
	if err != nil || cfg.RuntimeEndpoint != DefaultRuntimeEndpoint || cfg.BackoffBase.Duration != DefaultBackoffBase || cfg.Network != NetworkCNI ||
		cfg.ClusterDomain != "cluster.local" || cfg.ResolvConf != "/etc/resolv.conf" || cfg.ClusterDNS != nil {
		t.Errorf("defaults = %+v, %v", cfg, err)
	}
	dir := t.TempDir()
	good := filepath.Join(dir, "good.json")
	os.WriteFile(good, []byte(`{"runtimeEndpoint": "/x.sock", "network": "host", "pods": "20", "backoffBase": "1s",
		"clusterDNS": ["10.96.0.10", "fd00::a"], "clusterDomain": "k8s.example", "resolvConf": ""}`), 0o644)
	cfg, err = LoadConfig(good)
	if err != nil || cfg.endpoint() != "unix:///x.sock" || cfg.Network != NetworkHost || cfg.BackoffBase.Duration != time.Second ||
		len(cfg.ClusterDNS) != 2 || cfg.ClusterDomain != "k8s.example" || cfg.ResolvConf != DefaultResolvConf {
		t.Errorf("config = %+v, %v", cfg, err)
	}
	for name, body := range map[string]string{
		"unknown": `{"runtimeEndpont": "/x.sock"}`,
		"network": `{"network": "bridge"}`,
		"backoff": `{"backoffBase": "10m", "backoffMax": "1m"}`,
		"dns":     `{"clusterDNS": ["kube-dns"]}`,
	} {
		path := filepath.Join(dir, name+".json")
		os.WriteFile(path, []byte(body), 0o644)
		if _, err := LoadConfig(path); err == nil {
			t.Errorf("%s: config %s accepted", name, body)
		}
	}
}

func TestWriteAtomicReplacesContents(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "vol")
	if err := writeAtomic(dir, []provider.VolumeFile{{Path: "a", Data: []byte("1")}, {Path: "sub/b", Data: []byte("2"), Mode: 0o600}}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "sub", "b")); string(b) != "2" {
		t.Errorf("sub/b = %q", b)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "sub", "b")); fi.Mode().Perm() != 0o600 {
		t.Errorf("sub/b mode = %v", fi.Mode())
	}
	if err := writeAtomic(dir, []provider.VolumeFile{{Path: "a", Data: []byte("new")}}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "a")); string(b) != "new" {
		t.Errorf("a = %q", b)
	}
	if _, err := os.Lstat(filepath.Join(dir, "sub")); !os.IsNotExist(err) {
		t.Errorf("sub still there: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 3 { // a, ..data and one timestamped directory
		t.Errorf("entries = %v", entries)
	}
	if err := writeAtomic(dir, []provider.VolumeFile{{Path: "../escape"}}); err == nil {
		t.Error("path with .. accepted")
	}
}

// The pod phase follows the kubelet's rules for each restart policy.
func TestComputeStatusPhase(t *testing.T) {
	exited := func(code int32) *runtimeapi.ContainerStatus {
		return &runtimeapi.ContainerStatus{Id: "x", State: runtimeapi.ContainerState_CONTAINER_EXITED, ExitCode: code, Metadata: &runtimeapi.ContainerMetadata{}}
	}
	running := &runtimeapi.ContainerStatus{Id: "y", State: runtimeapi.ContainerState_CONTAINER_RUNNING, Metadata: &runtimeapi.ContainerMetadata{}}
	cases := []struct {
		name    string
		policy  corev1.RestartPolicy
		st      *ctrState
		sandbox bool
		want    corev1.PodPhase
	}{
		{"no sandbox yet", corev1.RestartPolicyAlways, nil, false, corev1.PodPending},
		{"not started", corev1.RestartPolicyAlways, nil, true, corev1.PodPending},
		{"running", corev1.RestartPolicyAlways, &ctrState{cur: running}, true, corev1.PodRunning},
		{"never, exit 0", corev1.RestartPolicyNever, &ctrState{cur: exited(0)}, true, corev1.PodSucceeded},
		{"never, exit 3", corev1.RestartPolicyNever, &ctrState{cur: exited(3)}, true, corev1.PodFailed},
		{"on failure, exit 0", corev1.RestartPolicyOnFailure, &ctrState{cur: exited(0)}, true, corev1.PodSucceeded},
		{"always, back-off", corev1.RestartPolicyAlways, &ctrState{cur: exited(1), waitReason: "CrashLoopBackOff"}, true, corev1.PodRunning},
		{"never, killed by a RestartAllContainers", corev1.RestartPolicyNever, &ctrState{cur: exited(137), reset: true}, true, corev1.PodRunning},
		{"on failure, stopped 0 to be resized", corev1.RestartPolicyOnFailure, &ctrState{cur: exited(0), restartNow: "x"}, true, corev1.PodRunning},
	}
	for _, c := range cases {
		pod := &corev1.Pod{Spec: corev1.PodSpec{RestartPolicy: c.policy, Containers: []corev1.Container{{Name: "main"}}}}
		rec := &podRecord{ctrs: map[string]*ctrState{}, sandboxReady: c.sandbox, initDone: true, status: &corev1.PodStatus{}}
		if c.st != nil {
			rec.ctrs["main"] = c.st
		}
		if got := computeStatus(rec, pod, "10.0.0.1").Phase; got != c.want {
			t.Errorf("%s: phase %s, want %s", c.name, got, c.want)
		}
	}
}

// A missing subPath is made with the volume's mode, setgid and sticky bits
// included, whatever the umask, as the kubelet makes it.
func TestASubPathIsMadeWithTheVolumesMode(t *testing.T) {
	root := t.TempDir()
	if err := os.Chmod(root, 0o777|os.ModeSetgid|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	if err := makeSubPath(root, "a/b"); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"a", "a/b"} {
		info, err := os.Stat(filepath.Join(root, dir))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := info.Mode(), os.ModeDir|0o777|os.ModeSetgid|os.ModeSticky; got != want {
			t.Errorf("%s has mode %v, want %v", dir, got, want)
		}
	}
	if err := makeSubPath(root, "a/b"); err != nil {
		t.Errorf("again, on directories that exist: %v", err)
	}
}

// The containers' oom_score_adj is the kubelet's: by QoS class, and for a
// burstable pod by the share of the node's memory requested, a sidecar's no
// higher than its pod's app container requesting least.
func TestOOMScoreAdjLikeTheKubelet(t *testing.T) {
	p := &Provider{node: &corev1.Node{Status: corev1.NodeStatus{Capacity: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1000Mi")}}}}
	mem := func(req, lim string) corev1.ResourceRequirements {
		r := corev1.ResourceRequirements{Requests: corev1.ResourceList{}, Limits: corev1.ResourceList{}}
		if req != "" {
			r.Requests[corev1.ResourceMemory] = resource.MustParse(req)
		}
		if lim != "" {
			r.Limits[corev1.ResourceMemory] = resource.MustParse(lim)
		}
		return r
	}
	always := corev1.ContainerRestartPolicyAlways
	guaranteed := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi"), corev1.ResourceCPU: resource.MustParse("100m")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi"), corev1.ResourceCPU: resource.MustParse("100m")},
	}
	cases := []struct {
		name      string
		pod       corev1.PodSpec
		container string
		want      int64
	}{
		{"guaranteed", corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: guaranteed}}}, "c", -997},
		{"best effort", corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}, "c", 1000},
		{"burstable, 100Mi of 1000Mi", corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: mem("100Mi", "")}}}, "c", 900},
		{"burstable, no request", corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: mem("", "100Mi")}}}, "c", 999},
		{"burstable, all the node", corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: mem("1000Mi", "")}}}, "c", 3},
		{"a sidecar no higher than the app container requesting least", corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "s", RestartPolicy: &always, Resources: mem("10Mi", "")}},
			Containers:     []corev1.Container{{Name: "a", Resources: mem("200Mi", "")}, {Name: "b", Resources: mem("100Mi", "")}},
		}, "s", 900},
		{"system-node-critical", corev1.PodSpec{PriorityClassName: "system-node-critical", Containers: []corev1.Container{{Name: "c"}}}, "c", -997},
	}
	for _, c := range cases {
		pod := &corev1.Pod{Spec: c.pod}
		var ctr *corev1.Container
		for i := range pod.Spec.InitContainers {
			if pod.Spec.InitContainers[i].Name == c.container {
				ctr = &pod.Spec.InitContainers[i]
			}
		}
		for i := range pod.Spec.Containers {
			if pod.Spec.Containers[i].Name == c.container {
				ctr = &pod.Spec.Containers[i]
			}
		}
		if got := p.oomScoreAdj(pod, ctr); got != c.want {
			t.Errorf("%s: oom_score_adj %d, want %d", c.name, got, c.want)
		}
	}
}
