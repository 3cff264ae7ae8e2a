package kube

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/provider"
)

func testMapper(t *testing.T, cfg Config) *mapper {
	t.Helper()
	cfg.Kubeconfig = "unused"
	if err := cfg.complete(); err != nil {
		t.Fatal(err)
	}
	return newMapper(cfg, "vk", "")
}

func TestTargetNamespace(t *testing.T) {
	long := strings.Repeat("n", 60)
	cases := []struct {
		strategy, ns, want string
	}{
		{NamespaceSuffix, "default", "default-east"},
		{"", "default", "default-east"},
		{NamespaceSame, "default", "default"},
		{NamespaceSuffix, long, long[:63-hashLen-1] + "-" + shortHash(long+"-east")},
	}
	for _, c := range cases {
		m := testMapper(t, Config{ClusterID: "east", NamespaceStrategy: c.strategy})
		if got := m.targetNamespace(c.ns); got != c.want {
			t.Errorf("%s: targetNamespace(%q) = %q, want %q", c.strategy, c.ns, got, c.want)
		}
		if got := m.targetNamespace(c.ns); len(got) > maxLabelValue {
			t.Errorf("namespace %q longer than %d", got, maxLabelValue)
		}
	}
}

func TestTruncatedNamesStayDistinct(t *testing.T) {
	a, b := strings.Repeat("a", 70)+"x", strings.Repeat("a", 70)+"y"
	ta, tb := truncateName(a, 63), truncateName(b, 63)
	if ta == tb || len(ta) != 63 || len(tb) != 63 {
		t.Fatalf("truncateName: %q and %q", ta, tb)
	}
	if truncateName(a, 63) != ta {
		t.Fatal("truncateName is not stable")
	}
	if x, y := nameWithHash("a-b", "c", 253), nameWithHash("a", "b-c", 253); x == y {
		t.Fatalf("nameWithHash collides: %q", x)
	}
	if n := nameWithHash(strings.Repeat("p", 253), "vol-x", 253); len(n) > 253 {
		t.Fatalf("nameWithHash too long: %d", len(n))
	}
}

func TestOffloadedByLabelFitsALabelValue(t *testing.T) {
	m := newMapper(Config{ClusterID: strings.Repeat("c", 40)}, strings.Repeat("n", 100), "")
	if len(m.offloadedBy) > maxLabelValue {
		t.Fatalf("label value %q too long", m.offloadedBy)
	}
}

func sourcePod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "web-1", Namespace: "shop", UID: "uid-1",
			Labels:          map[string]string{"app": "web"},
			Annotations:     map[string]string{"note": "x"},
			OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "web", UID: "rs"}},
		},
		Spec: corev1.PodSpec{
			NodeName:           "vk",
			ServiceAccountName: "builder",
			PriorityClassName:  "high",
			Priority:           ptr.To[int32](1000),
			NodeSelector:       map[string]string{"disk": "ssd"},
			Tolerations:        []corev1.Toleration{{Key: "virtual-kubelet.io/provider", Operator: corev1.TolerationOpExists}},
			Affinity:           &corev1.Affinity{},
			ReadinessGates:     []corev1.PodReadinessGate{{ConditionType: "x"}},
			Volumes: []corev1.Volume{
				{Name: "kube-api-access-abcde", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}},
				{Name: "conf", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "app-conf"}}}},
				{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "app-creds"}}},
				{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
			Containers: []corev1.Container{{
				Name: "web", Image: "nginx",
				Env: []corev1.EnvVar{
					{Name: "PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "app-creds"}, Key: "pw"}}},
					{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
				},
				EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "app-conf"}}}},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "kube-api-access-abcde", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"},
					{Name: "conf", MountPath: "/etc/conf"},
				},
			}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

func TestTargetPodDropsWhatMakesNoSenseRemotely(t *testing.T) {
	m := testMapper(t, Config{ClusterID: "east"})
	tp := m.targetPod(sourcePod())
	if tp.Namespace != "shop-east" || tp.Name != "web-1" {
		t.Errorf("target pod %s/%s", tp.Namespace, tp.Name)
	}
	if tp.Spec.NodeName != "" || tp.OwnerReferences != nil || tp.Status.Phase != "" {
		t.Errorf("nodeName, ownerReferences or status kept: %q %v %q", tp.Spec.NodeName, tp.OwnerReferences, tp.Status.Phase)
	}
	if tp.Spec.ServiceAccountName != "" || ptr.Deref(tp.Spec.AutomountServiceAccountToken, true) {
		t.Errorf("service account %q automount %v", tp.Spec.ServiceAccountName, tp.Spec.AutomountServiceAccountToken)
	}
	if tp.Spec.PriorityClassName != "" || tp.Spec.Priority != nil || tp.Spec.ReadinessGates != nil {
		t.Error("priority or readiness gates kept")
	}
	for _, v := range tp.Spec.Volumes {
		if strings.HasPrefix(v.Name, "kube-api-access-") {
			t.Error("token volume kept")
		}
	}
	if ms := tp.Spec.Containers[0].VolumeMounts; len(ms) != 1 || ms[0].Name != "conf" {
		t.Errorf("mounts = %v", ms)
	}
	if tp.Spec.NodeSelector["disk"] != "ssd" || len(tp.Spec.Tolerations) != 1 || tp.Spec.Affinity == nil {
		t.Error("scheduling fields not kept by default")
	}
	want := map[string]string{
		LabelOffloadedBy: "east.vk", LabelOriginUID: "uid-1", "app": "web",
	}
	for k, v := range want {
		if tp.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, tp.Labels[k], v)
		}
	}
	for k, v := range map[string]string{AnnotationOriginCluster: "east", AnnotationOriginNamespace: "shop", AnnotationOriginName: "web-1", AnnotationOriginUID: "uid-1", "note": "x"} {
		if tp.Annotations[k] != v {
			t.Errorf("annotation %s = %q, want %q", k, tp.Annotations[k], v)
		}
	}
	if got := m.originKey(tp); got != "shop/web-1" {
		t.Errorf("originKey = %q", got)
	}
}

func TestNodeSelectorPinningTheVirtualNodeIsDropped(t *testing.T) {
	m := testMapper(t, Config{})
	src := sourcePod()
	src.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "vk", "type": "virtual-kubelet"}
	if ns := m.targetPod(src).Spec.NodeSelector; ns != nil {
		t.Fatalf("nodeSelector = %v", ns)
	}
	src.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "elsewhere"}
	if ns := m.targetPod(src).Spec.NodeSelector; ns["kubernetes.io/hostname"] != "elsewhere" {
		t.Fatalf("nodeSelector = %v", ns)
	}
}

func TestNodeAffinityPinningTheVirtualNodeIsDropped(t *testing.T) {
	m := testMapper(t, Config{})
	pin := func(key string, values ...string) corev1.NodeSelectorRequirement {
		return corev1.NodeSelectorRequirement{Key: key, Operator: corev1.NodeSelectorOpIn, Values: values}
	}
	zone := pin("topology.kubernetes.io/zone", "a")
	for _, tc := range []struct {
		name     string
		affinity *corev1.NodeAffinity
		want     *corev1.NodeAffinity
	}{{
		name: "e2e's SetNodeAffinity: metadata.name In [node]",
		affinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{pin("metadata.name", "vk")}}}}},
		want: nil,
	}, {
		name: "a hostname pin beside another requirement keeps the other",
		affinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{pin(corev1.LabelHostname, "other", "vk"), zone}}}}},
		want: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{zone}}}}},
	}, {
		name: "a term pinning the node alone makes every target node fit",
		affinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{zone}}, {MatchFields: []corev1.NodeSelectorRequirement{pin("metadata.name", "vk")}}}}},
		want: nil,
	}, {
		name: "another node's pin and anti-affinity to this node stay",
		affinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{pin("metadata.name", "other"),
				{Key: "metadata.name", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"vk"}}}}}}},
		want: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{pin("metadata.name", "other"),
				{Key: "metadata.name", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"vk"}}}}}}},
	}, {
		name: "a preference for the node goes, others stay",
		affinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{
			{Weight: 1, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{pin(corev1.LabelHostname, "vk")}}},
			{Weight: 2, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{zone}}}}},
		want: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{
			{Weight: 2, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{zone}}}}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			src := sourcePod()
			src.Spec.Affinity = &corev1.Affinity{NodeAffinity: tc.affinity}
			kept := src.DeepCopy()
			got := m.targetPod(src).Spec.Affinity
			if tc.want == nil {
				if got != nil {
					t.Errorf("affinity = %+v, want none", got)
				}
			} else if got == nil || !equality.Semantic.DeepEqual(got.NodeAffinity, tc.want) {
				t.Errorf("node affinity = %+v, want %+v", got, tc.want)
			}
			if !equality.Semantic.DeepEqual(src, kept) {
				t.Error("the source pod was changed")
			}
		})
	}
}

func TestStripSchedulingFieldsByConfig(t *testing.T) {
	m := testMapper(t, Config{StripNodeSelector: true, StripAffinity: true, StripTolerations: true})
	tp := m.targetPod(sourcePod())
	if tp.Spec.NodeSelector != nil || tp.Spec.Affinity != nil || tp.Spec.Tolerations != nil {
		t.Errorf("not stripped: %v %v %v", tp.Spec.NodeSelector, tp.Spec.Affinity, tp.Spec.Tolerations)
	}
}

func TestOriginKeyIgnoresOthersObjects(t *testing.T) {
	m := testMapper(t, Config{ClusterID: "east"})
	other := testMapper(t, Config{ClusterID: "west"})
	tp := other.targetPod(sourcePod())
	if k := m.originKey(tp); k != "" {
		t.Fatalf("another node's pod has origin %q for us", k)
	}
}

func TestTranslateCopiesVolumesAndEnv(t *testing.T) {
	m := testMapper(t, Config{ClusterID: "east"})
	rp := &provider.ResolvedPod{
		Pod: sourcePod(),
		Env: map[string][]corev1.EnvVar{"web": {
			{Name: "LEVEL", Value: "debug"}, {Name: "PASSWORD", Value: "s3cret"}, {Name: "POD_NAME", Value: "web-1"},
		}},
		Volumes: map[string]*provider.VolumeContents{
			"kube-api-access-abcde": {Files: []provider.VolumeFile{{Path: "token", Data: []byte("t")}}},
			"conf":                  {Files: []provider.VolumeFile{{Path: "app.yaml", Data: []byte("a: 1"), Mode: 0o644}, {Path: "dir/b", Data: []byte{0xff}}}},
			"creds":                 {Files: []provider.VolumeFile{{Path: "pw", Data: []byte("s3cret"), Mode: 0o400}}},
		},
		PullCredentials: []provider.RegistryCredential{{Registry: "reg.example", Username: "u", Password: "p"}},
	}
	tp, copies := m.translate(rp)
	byName := map[string]depCopy{}
	for _, c := range copies {
		byName[c.name] = c
	}
	vols := map[string]corev1.Volume{}
	for _, v := range tp.Spec.Volumes {
		vols[v.Name] = v
	}
	conf := vols["conf"].ConfigMap
	if conf == nil || len(conf.Items) != 2 || conf.Items[1].Path != "dir/b" || *conf.Items[0].Mode != 0o644 {
		t.Fatalf("conf volume = %+v", vols["conf"])
	}
	if c := byName[conf.Name]; c.kind != copyConfigMap || string(c.data[conf.Items[0].Key]) != "a: 1" {
		t.Errorf("conf copy = %+v", c)
	}
	creds := vols["creds"].Secret
	if creds == nil || creds.SecretName == "app-creds" {
		t.Fatalf("creds volume = %+v", vols["creds"])
	}
	if c := byName[creds.SecretName]; c.kind != copySecret || string(c.data[creds.Items[0].Key]) != "s3cret" {
		t.Errorf("creds copy = %+v", c)
	}
	if _, ok := vols["scratch"]; !ok || vols["scratch"].EmptyDir == nil {
		t.Error("emptyDir volume not kept")
	}
	env := tp.Spec.Containers[0].Env
	if len(env) != 3 || tp.Spec.Containers[0].EnvFrom != nil {
		t.Fatalf("env = %+v", env)
	}
	for _, e := range env {
		switch e.Name {
		case "POD_NAME":
			if e.ValueFrom == nil || e.ValueFrom.FieldRef == nil {
				t.Errorf("fieldRef not kept: %+v", e)
			}
		default:
			if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
				t.Fatalf("%s not from the env Secret: %+v", e.Name, e)
			}
			ref := e.ValueFrom.SecretKeyRef
			want := map[string]string{"LEVEL": "debug", "PASSWORD": "s3cret"}[e.Name]
			if got := string(byName[ref.Name].data[ref.Key]); got != want {
				t.Errorf("%s = %q, want %q", e.Name, got, want)
			}
		}
	}
	if len(tp.Spec.ImagePullSecrets) != 1 || byName[tp.Spec.ImagePullSecrets[0].Name].secretType != corev1.SecretTypeDockerConfigJson {
		t.Errorf("pull secret = %v", tp.Spec.ImagePullSecrets)
	}
}

func TestSourceStatusReportsTheVirtualNodeAsHost(t *testing.T) {
	m := newMapper(Config{ClusterID: "east"}, "vk", "10.1.2.3")
	tp := m.targetPod(sourcePod())
	tp.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.0.5", HostIP: "192.168.0.9", ObservedGeneration: 4,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, ObservedGeneration: 4}}}
	sp := m.sourcePod(tp, nil)
	if sp.Namespace != "shop" || sp.Name != "web-1" || sp.UID != "uid-1" {
		t.Errorf("source pod %s/%s %s", sp.Namespace, sp.Name, sp.UID)
	}
	if sp.Status.PodIP != "10.244.0.5" || sp.Status.HostIP != "10.1.2.3" || sp.Status.Phase != corev1.PodRunning || len(sp.Status.Conditions) != 1 {
		t.Errorf("status = %+v", sp.Status)
	}
	if _, ok := sp.Labels[LabelOffloadedBy]; ok {
		t.Error("our label leaks into the source pod")
	}
	if sp.Status.ObservedGeneration != 0 || sp.Status.Conditions[0].ObservedGeneration != 0 {
		t.Errorf("the target's generations leak into the source pod's status: %d, %d",
			sp.Status.ObservedGeneration, sp.Status.Conditions[0].ObservedGeneration)
	}
}

func TestFreeCapacity(t *testing.T) {
	ready := []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	node := func(name string, labels map[string]string, conds []corev1.NodeCondition, unsched bool, alloc corev1.ResourceList) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Spec:   corev1.NodeSpec{Unschedulable: unsched},
			Status: corev1.NodeStatus{Allocatable: alloc, Conditions: conds}}
	}
	rl := func(cpu, mem, pods string) corev1.ResourceList {
		return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem), corev1.ResourcePods: resource.MustParse(pods)}
	}
	pod := func(node string, labels map[string]string, phase corev1.PodPhase, cpu string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{NodeName: node,
			Containers: []corev1.Container{{Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}}}},
			Status: corev1.PodStatus{Phase: phase}}
	}
	gpu := rl("4", "8Gi", "110")
	gpu["nvidia.com/gpu"] = resource.MustParse("2")
	nodes := []*corev1.Node{
		node("a", nil, ready, false, rl("4", "8Gi", "110")),
		node("b", nil, ready, false, gpu),
		node("notready", nil, []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}}, false, rl("4", "8Gi", "110")),
		node("cordoned", nil, ready, true, rl("4", "8Gi", "110")),
		node("virtual", map[string]string{"type": "virtual-kubelet"}, ready, false, rl("100", "1Ti", "1000")),
	}
	pods := []*corev1.Pod{
		pod("a", nil, corev1.PodRunning, "1"),
		pod("b", nil, corev1.PodPending, "500m"),
		pod("a", map[string]string{LabelOffloadedBy: "east.vk"}, corev1.PodRunning, "2"), // ours: not subtracted
		pod("a", nil, corev1.PodSucceeded, "3"),                                          // terminal
		pod("notready", nil, corev1.PodRunning, "3"),                                     // not an eligible node
	}
	got := freeCapacity(nodes, pods, mustSelector(t, "type!=virtual-kubelet"), "east.vk", nil)
	want := map[corev1.ResourceName]string{corev1.ResourceCPU: "6500m", corev1.ResourceMemory: "16Gi", corev1.ResourcePods: "218", "nvidia.com/gpu": "2"}
	for r, w := range want {
		q := got[r]
		if q.Cmp(resource.MustParse(w)) != 0 {
			t.Errorf("%s = %s, want %s", r, q.String(), w)
		}
	}
	capped := freeCapacity(nodes, pods, mustSelector(t, "type!=virtual-kubelet"), "east.vk", corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")})
	if q := capped[corev1.ResourceCPU]; q.Cmp(resource.MustParse("2")) != 0 {
		t.Errorf("capped cpu = %s", q.String())
	}
}

func TestPodRequestsCountsInitContainersAndOverhead(t *testing.T) {
	req := func(cpu string) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}
	}
	p := &corev1.Pod{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Resources: req("3")}},
		Containers:     []corev1.Container{{Resources: req("1")}, {Resources: req("1")}},
		Overhead:       corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
	}}
	if q := podRequests(p)[corev1.ResourceCPU]; q.Cmp(resource.MustParse("3100m")) != 0 {
		t.Fatalf("requests = %s", q.String())
	}
}

func mustQ(s string) resource.Quantity { return resource.MustParse(s) }

func mustSelector(t *testing.T, s string) labels.Selector {
	t.Helper()
	sel, err := labels.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return sel
}
