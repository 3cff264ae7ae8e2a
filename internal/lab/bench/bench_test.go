package bench

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/process/agent"
)

func TestMedianTakesEachFigureSeparately(t *testing.T) {
	runs := []*Result{
		{Pods: 10, NodeResult: NodeResult{PodsPerS: 300, RatioToCeiling: 0.9, P99ms: 50, WritesByKind: map[string]float64{"PATCH pods/status": 1},
			IdleWritesPerS: map[string]float64{"POST serviceaccounts/token": 4}, IdleMaxMinuteWritesPerS: 5, PodWatches: ptr.To(0.0)}},
		{Pods: 10, NodeResult: NodeResult{PodsPerS: 100, RatioToCeiling: 0.7, P99ms: 900, WritesByKind: map[string]float64{"PATCH pods/status": 1, "PUT leases": 0.2},
			IdleWritesPerS: map[string]float64{"POST serviceaccounts/token": 5}, IdleMaxMinuteWritesPerS: 6, PodWatches: ptr.To(164.0)}},
		{Pods: 10, NodeResult: NodeResult{PodsPerS: 200, RatioToCeiling: 0.8, P99ms: 70,
			IdleWritesPerS: map[string]float64{"POST serviceaccounts/token": 3}, IdleMaxMinuteWritesPerS: 4, PodWatches: ptr.To(2.0)}},
	}
	m := Median(runs)
	if m.PodsPerS != 200 || m.RatioToCeiling != 0.8 || m.P99ms != 70 {
		t.Fatalf("median = %.0f pods/s, ratio %.1f, p99 %.0f; want 200, 0.8, 70", m.PodsPerS, m.RatioToCeiling, m.P99ms)
	}
	// A kind missing from a run counts as zero there.
	if got := m.WritesByKind["PUT leases"]; got != 0 {
		t.Fatalf("PUT leases = %v, want the median of 0, 0.2, 0 = 0", got)
	}
	if got := m.WritesByKind["PATCH pods/status"]; got != 1 {
		t.Fatalf("PATCH pods/status = %v, want 1", got)
	}
	if got := m.IdleWritesPerS["POST serviceaccounts/token"]; got != 4 || m.IdleMaxMinuteWritesPerS != 5 {
		t.Fatalf("idle token writes %v/s, busiest minute %v/s; want the medians 4 and 5", got, m.IdleMaxMinuteWritesPerS)
	}
	if m.PodWatches == nil || *m.PodWatches != 2 {
		t.Fatalf("pod watches %v, want the median of 0, 164, 2 = 2", m.PodWatches)
	}
	if len(m.Runs) != 3 || m.Pods != 10 {
		t.Fatalf("runs = %d, pods = %d", len(m.Runs), m.Pods)
	}
	if m.Kwok != nil {
		t.Fatalf("kwok figures without kwok runs: %+v", m.Kwok)
	}
	if Median(runs[:1]) != runs[0] {
		t.Fatal("the median of one run is not that run")
	}
}

func TestMedianOfKwokFigures(t *testing.T) {
	runs := []*Result{
		{Kwok: &NodeResult{PodsPerS: 150, CPUSeconds: 3}},
		{Kwok: &NodeResult{PodsPerS: 190, CPUSeconds: 1}},
		{Kwok: &NodeResult{PodsPerS: 170, CPUSeconds: 2}},
	}
	m := Median(runs)
	if m.Kwok == nil || m.Kwok.PodsPerS != 170 || m.Kwok.CPUSeconds != 2 {
		t.Fatalf("kwok median = %+v, want 170 pods/s and 2 CPU s", m.Kwok)
	}
}

// The protocol's node reports its provider process's CPU beside the agent's,
// as a median of its own, under "remote" in the JSON.
func TestTheProvidersCPUIsReportedWithTheRemoteNode(t *testing.T) {
	runs := []*Result{
		{Remote: &NodeResult{CPUSeconds: 7, ProviderCPUSeconds: 2.5}},
		{Remote: &NodeResult{CPUSeconds: 6, ProviderCPUSeconds: 1.5}},
		{Remote: &NodeResult{CPUSeconds: 8, ProviderCPUSeconds: 2}},
	}
	m := Median(runs)
	if m.Remote == nil || m.Remote.CPUSeconds != 7 || m.Remote.ProviderCPUSeconds != 2 {
		t.Fatalf("remote median = %+v, want 7 CPU s in the agent and 2 in the provider", m.Remote)
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Remote map[string]any `json:"remote"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.Remote["provider_cpu_s"] != 2.0 {
		t.Errorf("remote = %v, want provider_cpu_s 2", got.Remote)
	}
}

// The agent's figures stay at the top level of the JSON, under the names
// documented before kwok was added; kwok's are under "kwok".
func TestResultJSONKeepsTheDocumentedNames(t *testing.T) {
	b, err := json.Marshal(&Result{Pods: 5, PodShape: ShapeDeployment, NodeResult: NodeResult{PodsPerS: 1, WritesPerPod: 2}, Kwok: &NodeResult{PodsPerS: 3}})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"pods", "pod_shape", "ceiling_pods_per_s", "ceiling_delete_pods_per_s", "pods_per_s", "ratio_to_ceiling",
		"p50_ms", "p99_ms", "writes_per_pod", "peak_rss_mib", "heap_growth_mib", "cpu_s", "delete_pods_per_s"} {
		if _, ok := m[k]; !ok {
			t.Errorf("no %q in %s", k, b)
		}
	}
	kwok, _ := m["kwok"].(map[string]any)
	if kwok["pods_per_s"] != 3.0 {
		t.Errorf("kwok = %v, want pods_per_s 3", m["kwok"])
	}
}

func TestRunningStatusPatchIsAKubeletShapedStatus(t *testing.T) {
	p := (&podTemplate{shape: ShapeMinimal}).pod("p-1", "node")
	p.UID = "uid-1"
	patch, err := runningStatusPatch(p, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"uid":"uid-1"`, `"phase":"Running"`, `"type":"Ready"`, `"type":"ContainersReady"`, `"name":"c"`, `"running":{`, `"podIP":"10.0.0.2"`} {
		if !strings.Contains(string(patch), want) {
			t.Errorf("patch lacks %s: %s", want, patch)
		}
	}
}

func TestPodShapeFlag(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    PodShape
		wantErr bool
	}{
		{in: "deployment", want: ShapeDeployment},
		{in: "minimal", want: ShapeMinimal},
		{in: "", wantErr: true},
		{in: "Deployment", wantErr: true},
		{in: "statefulset", wantErr: true},
	} {
		s := ShapeDeployment
		err := s.Set(tc.in)
		if (err != nil) != tc.wantErr {
			t.Errorf("Set(%q) error = %v, want error %v", tc.in, err, tc.wantErr)
			continue
		}
		if err == nil && s != tc.want {
			t.Errorf("Set(%q) = %q, want %q", tc.in, s, tc.want)
		}
		if err != nil && s != ShapeDeployment {
			t.Errorf("a failed Set(%q) changed the value to %q", tc.in, s)
		}
	}
}

func TestComparisonFlag(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Comparison
		wantErr bool
	}{
		{in: "kwok", want: CompareKwok},
		{in: "none", want: ""},
		{in: "", want: ""},
		{in: "kind", wantErr: true},
	} {
		c := CompareKwok
		err := c.Set(tc.in)
		if (err != nil) != tc.wantErr {
			t.Errorf("Set(%q) error = %v, want error %v", tc.in, err, tc.wantErr)
			continue
		}
		if err == nil && c != tc.want {
			t.Errorf("Set(%q) = %q, want %q", tc.in, c, tc.want)
		}
	}
}

func TestDeploymentShapedPod(t *testing.T) {
	owner := &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "bench-" + templateHash, UID: "rs-uid",
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
	tmpl := &podTemplate{shape: ShapeDeployment, owner: owner}
	p := tmpl.pod(tmpl.name(7), "node-1")

	if p.Name != "bench-"+templateHash+"-00007" {
		t.Errorf("name = %q, want a ReplicaSet pod's name", p.Name)
	}
	if p.Spec.NodeName != "node-1" {
		t.Errorf("nodeName = %q", p.Spec.NodeName)
	}
	if p.Labels["app"] != appName || p.Labels["pod-template-hash"] != templateHash {
		t.Errorf("labels = %v", p.Labels)
	}
	if len(p.OwnerReferences) != 1 || p.OwnerReferences[0] != *owner {
		t.Errorf("owner references = %+v, want the ReplicaSet's", p.OwnerReferences)
	}
	// The token comes from admission: the pod asks for nothing either way.
	if p.Spec.AutomountServiceAccountToken != nil || p.Spec.ServiceAccountName != "" || len(p.Spec.Volumes) != 0 {
		t.Errorf("automount %v, service account %q, volumes %v: want the defaults, for admission to fill",
			p.Spec.AutomountServiceAccountToken, p.Spec.ServiceAccountName, p.Spec.Volumes)
	}
	if len(p.Spec.Containers) != 1 {
		t.Fatalf("containers = %d", len(p.Spec.Containers))
	}
	c := p.Spec.Containers[0]
	if cpu, mem := c.Resources.Requests[corev1.ResourceCPU], c.Resources.Requests[corev1.ResourceMemory]; cpu.Cmp(resource.MustParse("10m")) != 0 || mem.Cmp(resource.MustParse("16Mi")) != 0 {
		t.Errorf("requests = %v, want cpu 10m and memory 16Mi", c.Resources.Requests)
	}
	if len(c.Env) < 2 {
		t.Errorf("env = %v, want a few variables", c.Env)
	}
	if g := p.Spec.TerminationGracePeriodSeconds; g == nil || *g != 30 {
		t.Errorf("grace period = %v, want the default 30 s", g)
	}
	// Pods of one template differ only in name.
	q := tmpl.pod(tmpl.name(8), "node-1")
	if q.Name == p.Name {
		t.Errorf("pods 7 and 8 are both called %s", p.Name)
	}
}

func TestMinimalShapedPodMountsNoToken(t *testing.T) {
	tmpl := &podTemplate{shape: ShapeMinimal}
	p := tmpl.pod(tmpl.name(3), "node-1")
	if p.Name != "p-3" {
		t.Errorf("name = %q", p.Name)
	}
	if a := p.Spec.AutomountServiceAccountToken; a == nil || *a {
		t.Errorf("automountServiceAccountToken = %v, want false", a)
	}
	if len(p.OwnerReferences) != 0 || len(p.Spec.Containers[0].Env) != 0 {
		t.Errorf("owner %v, env %v: want none", p.OwnerReferences, p.Spec.Containers[0].Env)
	}
}

// admitted is p as the ServiceAccount admission plugin leaves it: the default
// ServiceAccount and the kube-api-access projected volume.
func admitted(p *corev1.Pod) *corev1.Pod {
	p = p.DeepCopy()
	p.Spec.ServiceAccountName = "default"
	p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "kube-api-access-x7k2p", VolumeSource: corev1.VolumeSource{
		Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{ExpirationSeconds: ptr.To[int64](3607), Path: "token"}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}}},
		}},
	}})
	return p
}

func TestShapeCheckRefusesPodsWithoutTheirToken(t *testing.T) {
	owner := &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "rs-uid"}
	tmpl := &podTemplate{shape: ShapeDeployment, owner: owner}
	bare := tmpl.pod("p", "n")
	if err := tmpl.check(bare); err == nil || !strings.Contains(err.Error(), "admission") {
		t.Fatalf("check of a pod without its token volume = %v, want an error naming the admission plugin", err)
	}
	if err := tmpl.check(admitted(bare)); err != nil {
		t.Fatalf("check of an admitted pod: %v", err)
	}
	// Token-less pods are what the minimal shape promises.
	if err := (&podTemplate{shape: ShapeMinimal}).check((&podTemplate{shape: ShapeMinimal}).pod("p", "n")); err != nil {
		t.Fatalf("check of a minimal pod: %v", err)
	}
}

// The ceiling requests each token as the kubelet does for kube-api-access:
// bound to the pod, the API server's default audience, the projection's lifetime.
func TestTokenRequestIsTheKubelets(t *testing.T) {
	p := admitted((&podTemplate{shape: ShapeDeployment}).pod("p-1", "n"))
	p.UID = "pod-uid"
	toks := tokenSources(p)
	if len(toks) != 1 {
		t.Fatalf("token sources = %d, want 1", len(toks))
	}
	tr := tokenRequest(p, toks[0])
	if len(tr.Spec.Audiences) != 0 {
		t.Errorf("audiences = %v, want none (the API server's default)", tr.Spec.Audiences)
	}
	if e := tr.Spec.ExpirationSeconds; e == nil || *e != 3607 {
		t.Errorf("expirationSeconds = %v, want 3607", e)
	}
	ref := tr.Spec.BoundObjectRef
	if ref == nil || ref.Kind != "Pod" || ref.APIVersion != "v1" || ref.Name != "p-1" || ref.UID != "pod-uid" {
		t.Errorf("bound object = %+v, want the pod", ref)
	}
	withAudience := *toks[0]
	withAudience.Audience = "vault"
	if got := tokenRequest(p, &withAudience).Spec.Audiences; len(got) != 1 || got[0] != "vault" {
		t.Errorf("audiences = %v, want [vault]", got)
	}
}

func TestWritesPerPodSubtractsTheBenchmarksOwn(t *testing.T) {
	before := map[string]float64{"POST pods": 100, "PATCH pods/status": 40, "PUT leases": 7}
	after := map[string]float64{"POST pods": 150, "PATCH pods/status": 90, "PUT leases": 8, "DELETE pods": 0}
	got := writesPerPod(before, after, map[string]float64{"POST pods": 1}, 50)
	want := map[string]float64{"PATCH pods/status": 1, "PUT leases": 0.02}
	if len(got) != len(want) {
		t.Fatalf("writes = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
}

func TestPodWatchesAreCountedUnderTheAgentsLabels(t *testing.T) {
	for url, want := range map[string]bool{
		"https://api/api/v1/pods?fieldSelector=spec.nodeName%3Dn&watch=true":                          true,
		"https://api/api/v1/pods?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan": true,
		"https://api/api/v1/namespaces/ns/pods?watch=true":                                            true,
		"https://api/api/v1/pods?fieldSelector=spec.nodeName%3Dn":                                     false,
		"https://api/api/v1/namespaces/ns/pods/p/status":                                              false,
		"https://api/api/v1/secrets?watch=true":                                                       false,
	} {
		r, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		verb, resource := agent.APIRequestLabels(r)
		if got := isPodWatch(verb, resource); got != want {
			t.Errorf("%s (labels %q, %q): counted as a pod watch %v, want %v", url, verb, resource, got, want)
		}
	}
}
