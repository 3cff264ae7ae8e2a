package resolve

import (
	"encoding/base64"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/provider"
)

// fakeSource serves objects from maps; tokens are "token:<audience>:<seconds>".
type fakeSource struct {
	configMaps map[string]*corev1.ConfigMap // by namespace/name
	secrets    map[string]*corev1.Secret
	svcs       []*corev1.Service
	nodeObj    *corev1.Node
}

func (f *fakeSource) configMap(ns, name string) (*corev1.ConfigMap, error) {
	return f.configMaps[ns+"/"+name], nil
}
func (f *fakeSource) secret(ns, name string) (*corev1.Secret, error) {
	return f.secrets[ns+"/"+name], nil
}
func (f *fakeSource) services(ns string) ([]*corev1.Service, error) {
	var out []*corev1.Service
	for _, s := range f.svcs {
		if s.Namespace == ns {
			out = append(out, s)
		}
	}
	return out, nil
}
func (f *fakeSource) node() (*corev1.Node, error) {
	if f.nodeObj == nil {
		return nil, errors.New("no node")
	}
	return f.nodeObj, nil
}
func (f *fakeSource) token(_ *corev1.Pod, aud string, exp *int64) ([]byte, error) {
	return fmt.Appendf(nil, "token:%s:%d", aud, ptr.Deref(exp, 0)), nil
}

func world() *fakeSource {
	return &fakeSource{
		configMaps: map[string]*corev1.ConfigMap{
			"ns/cm": {ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm"},
				Data:       map[string]string{"color": "blue", "size": "L", "1bad-key": "x"},
				BinaryData: map[string][]byte{"bin": {0, 1, 2}}},
			"kube-system/cm": {ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "cm"},
				Data: map[string]string{"color": "red"}},
		},
		secrets: map[string]*corev1.Secret{
			"ns/sec": {ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "sec"},
				Data: map[string][]byte{"password": []byte("s3cr3t"), "user": []byte("admin")}},
		},
		svcs: []*corev1.Service{
			{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "kubernetes"},
				Spec: corev1.ServiceSpec{ClusterIP: "10.0.0.1", Ports: []corev1.ServicePort{{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP}}}},
			{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "other"},
				Spec: corev1.ServiceSpec{ClusterIP: "10.0.0.9", Ports: []corev1.ServicePort{{Port: 80}}}},
			{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "my-db"},
				Spec: corev1.ServiceSpec{ClusterIP: "10.0.0.20", Ports: []corev1.ServicePort{
					{Name: "sql", Port: 5432, Protocol: corev1.ProtocolTCP},
					{Name: "metrics-udp", Port: 9000, Protocol: corev1.ProtocolUDP}}}},
			{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "headless"},
				Spec: corev1.ServiceSpec{ClusterIP: "None", Ports: []corev1.ServicePort{{Port: 80}}}},
		},
		nodeObj: &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "vk"},
			Status: corev1.NodeStatus{
				Addresses: []corev1.NodeAddress{
					{Type: corev1.NodeHostName, Address: "vk"},
					{Type: corev1.NodeExternalIP, Address: "2001:db8::5"},
					{Type: corev1.NodeInternalIP, Address: "192.0.2.10"},
					{Type: corev1.NodeInternalIP, Address: "192.0.2.11"},
				},
				Allocatable: corev1.ResourceList{
					corev1.ResourceCPU:              resource.MustParse("4"),
					corev1.ResourceMemory:           resource.MustParse("8Gi"),
					corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
				},
			},
		},
	}
}

func basePod(env []corev1.EnvVar, from []corev1.EnvFromSource) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "uid-1",
			Labels: map[string]string{"app": "web", "tier": "front"}, Annotations: map[string]string{"note": `say "hi"`}},
		Spec: corev1.PodSpec{
			NodeName: "vk", ServiceAccountName: "robot", EnableServiceLinks: ptr.To(false),
			Containers: []corev1.Container{{Name: "c", Env: env, EnvFrom: from,
				Resources: corev1.ResourceRequirements{
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
				}}},
		},
		Status: corev1.PodStatus{PodIP: "10.244.0.7", PodIPs: []corev1.PodIP{{IP: "10.244.0.7"}, {IP: "fd00::7"}}},
	}
}

func envOf(t *testing.T, p *corev1.Pod, src *fakeSource) []corev1.EnvVar {
	t.Helper()
	rp, _, err := resolvePod(p, src, parts{env: true})
	if err != nil {
		t.Fatal(err)
	}
	return rp.Env["c"]
}

func kv(pairs ...string) []corev1.EnvVar {
	out := []corev1.EnvVar{}
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, corev1.EnvVar{Name: pairs[i], Value: pairs[i+1]})
	}
	return out
}

func fieldEnv(name, path string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: path}}}
}

func resEnv(name, res, divisor string) corev1.EnvVar {
	fs := &corev1.ResourceFieldSelector{Resource: res}
	if divisor != "" {
		fs.Divisor = resource.MustParse(divisor)
	}
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: fs}}
}

func TestEnvironment(t *testing.T) {
	tests := []struct {
		name  string
		env   []corev1.EnvVar
		from  []corev1.EnvFromSource
		links bool
		want  []corev1.EnvVar
	}{{
		name: "values and $(VAR) expansion like the kubelet",
		env: []corev1.EnvVar{
			{Name: "A", Value: "a"},
			{Name: "B", Value: "x$(A)y"},
			{Name: "UNDEF", Value: "$(NOPE)-$(LATER)"},
			{Name: "ESC", Value: "$$(A) $$ cost$ $x $(A"},
			{Name: "LATER", Value: "l"},
			{Name: "EMPTY"},
			{Name: "SVC", Value: "$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)"},
		},
		want: kv("A", "a", "B", "xay", "UNDEF", "$(NOPE)-$(LATER)", "ESC", "$(A) $ cost$ $x $(A",
			"LATER", "l", "EMPTY", "", "SVC", "10.0.0.1:443",
			"KUBERNETES_SERVICE_HOST", "10.0.0.1", "KUBERNETES_SERVICE_PORT", "443", "KUBERNETES_SERVICE_PORT_HTTPS", "443",
			"KUBERNETES_PORT", "tcp://10.0.0.1:443", "KUBERNETES_PORT_443_TCP", "tcp://10.0.0.1:443",
			"KUBERNETES_PORT_443_TCP_PROTO", "tcp", "KUBERNETES_PORT_443_TCP_PORT", "443", "KUBERNETES_PORT_443_TCP_ADDR", "10.0.0.1"),
	}, {
		name: "configMapKeyRef, secretKeyRef and optional references",
		env: []corev1.EnvVar{
			{Name: "COLOR", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}, Key: "color"}}},
			{Name: "PW", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "sec"}, Key: "password"}}},
			{Name: "OPT_CM", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "nope"}, Key: "k", Optional: ptr.To(true)}}},
			{Name: "OPT_KEY", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "sec"}, Key: "nope", Optional: ptr.To(true)}}},
			{Name: "BOTH", Value: "$(COLOR)/$(PW)/$(OPT_CM)"},
		},
		want: kv("COLOR", "blue", "PW", "s3cr3t", "BOTH", "blue/s3cr3t/$(OPT_CM)",
			"KUBERNETES_SERVICE_HOST", "10.0.0.1", "KUBERNETES_SERVICE_PORT", "443", "KUBERNETES_SERVICE_PORT_HTTPS", "443",
			"KUBERNETES_PORT", "tcp://10.0.0.1:443", "KUBERNETES_PORT_443_TCP", "tcp://10.0.0.1:443",
			"KUBERNETES_PORT_443_TCP_PROTO", "tcp", "KUBERNETES_PORT_443_TCP_PORT", "443", "KUBERNETES_PORT_443_TCP_ADDR", "10.0.0.1"),
	}, {
		name: "envFrom with prefix; env overrides envFrom; keys kept as the 1.37 kubelet keeps them",
		from: []corev1.EnvFromSource{
			{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}}},
			{Prefix: "S_", SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "sec"}}},
			{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "gone"}, Optional: ptr.To(true)}},
		},
		env: []corev1.EnvVar{{Name: "size", Value: "XL-$(color)"}, {Name: "KUBERNETES_SERVICE_HOST", Value: "mine"}},
		want: kv("1bad-key", "x", "color", "blue", "size", "XL-blue", "S_password", "s3cr3t", "S_user", "admin", "KUBERNETES_SERVICE_HOST", "mine",
			"KUBERNETES_SERVICE_PORT", "443", "KUBERNETES_SERVICE_PORT_HTTPS", "443",
			"KUBERNETES_PORT", "tcp://10.0.0.1:443", "KUBERNETES_PORT_443_TCP", "tcp://10.0.0.1:443",
			"KUBERNETES_PORT_443_TCP_PROTO", "tcp", "KUBERNETES_PORT_443_TCP_PORT", "443", "KUBERNETES_PORT_443_TCP_ADDR", "10.0.0.1"),
	}, {
		name: "fieldRef",
		env: []corev1.EnvVar{
			fieldEnv("NAME", "metadata.name"), fieldEnv("NS", "metadata.namespace"), fieldEnv("UID", "metadata.uid"),
			fieldEnv("APP", "metadata.labels['app']"), fieldEnv("NONE", "metadata.labels['none']"),
			fieldEnv("NOTE", "metadata.annotations['note']"), fieldEnv("LABELS", "metadata.labels"),
			fieldEnv("NODE", "spec.nodeName"), fieldEnv("SA", "spec.serviceAccountName"),
			fieldEnv("HOST_IP", "status.hostIP"), fieldEnv("HOST_IPS", "status.hostIPs"),
			fieldEnv("POD_IP", "status.podIP"), fieldEnv("POD_IPS", "status.podIPs"),
		},
		want: kv("NAME", "p", "NS", "ns", "UID", "uid-1", "APP", "web", "NONE", "", "NOTE", `say "hi"`,
			"LABELS", "app=\"web\"\ntier=\"front\"", "NODE", "vk", "SA", "robot",
			"HOST_IP", "192.0.2.10", "HOST_IPS", "192.0.2.10,2001:db8::5", "POD_IP", "10.244.0.7", "POD_IPS", "10.244.0.7,fd00::7",
			"KUBERNETES_SERVICE_HOST", "10.0.0.1", "KUBERNETES_SERVICE_PORT", "443", "KUBERNETES_SERVICE_PORT_HTTPS", "443",
			"KUBERNETES_PORT", "tcp://10.0.0.1:443", "KUBERNETES_PORT_443_TCP", "tcp://10.0.0.1:443",
			"KUBERNETES_PORT_443_TCP_PROTO", "tcp", "KUBERNETES_PORT_443_TCP_PORT", "443", "KUBERNETES_PORT_443_TCP_ADDR", "10.0.0.1"),
	}, {
		name: "resourceFieldRef with divisors; unset limits are the node's allocatable",
		env: []corev1.EnvVar{
			resEnv("LIM_CPU", "limits.cpu", ""), resEnv("LIM_CPU_M", "limits.cpu", "1m"),
			resEnv("LIM_MEM", "limits.memory", ""), resEnv("LIM_MEM_MI", "limits.memory", "1Mi"),
			resEnv("LIM_EPH_GI", "limits.ephemeral-storage", "1Gi"),
			resEnv("REQ_CPU", "requests.cpu", ""), resEnv("REQ_CPU_M", "requests.cpu", "1m"),
			resEnv("REQ_MEM_MI", "requests.memory", "1Mi"), resEnv("REQ_MEM_K", "requests.memory", "1k"),
			resEnv("REQ_EPH", "requests.ephemeral-storage", ""),
		},
		want: kv("LIM_CPU", "4", "LIM_CPU_M", "4000", "LIM_MEM", "67108864", "LIM_MEM_MI", "64", "LIM_EPH_GI", "100",
			"REQ_CPU", "1", "REQ_CPU_M", "250", "REQ_MEM_MI", "32", "REQ_MEM_K", "33555", "REQ_EPH", "0",
			"KUBERNETES_SERVICE_HOST", "10.0.0.1", "KUBERNETES_SERVICE_PORT", "443", "KUBERNETES_SERVICE_PORT_HTTPS", "443",
			"KUBERNETES_PORT", "tcp://10.0.0.1:443", "KUBERNETES_PORT_443_TCP", "tcp://10.0.0.1:443",
			"KUBERNETES_PORT_443_TCP_PROTO", "tcp", "KUBERNETES_PORT_443_TCP_PORT", "443", "KUBERNETES_PORT_443_TCP_ADDR", "10.0.0.1"),
	}, {
		name:  "service links of the pod's namespace, docker-link style, headless skipped",
		links: true,
		env:   []corev1.EnvVar{{Name: "DB", Value: "$(MY_DB_SERVICE_HOST):$(MY_DB_SERVICE_PORT_SQL)"}},
		want: kv("DB", "10.0.0.20:5432",
			"KUBERNETES_SERVICE_HOST", "10.0.0.1", "KUBERNETES_SERVICE_PORT", "443", "KUBERNETES_SERVICE_PORT_HTTPS", "443",
			"KUBERNETES_PORT", "tcp://10.0.0.1:443", "KUBERNETES_PORT_443_TCP", "tcp://10.0.0.1:443",
			"KUBERNETES_PORT_443_TCP_PROTO", "tcp", "KUBERNETES_PORT_443_TCP_PORT", "443", "KUBERNETES_PORT_443_TCP_ADDR", "10.0.0.1",
			"MY_DB_SERVICE_HOST", "10.0.0.20", "MY_DB_SERVICE_PORT", "5432", "MY_DB_SERVICE_PORT_SQL", "5432", "MY_DB_SERVICE_PORT_METRICS_UDP", "9000",
			"MY_DB_PORT", "tcp://10.0.0.20:5432",
			"MY_DB_PORT_5432_TCP", "tcp://10.0.0.20:5432", "MY_DB_PORT_5432_TCP_PROTO", "tcp", "MY_DB_PORT_5432_TCP_PORT", "5432", "MY_DB_PORT_5432_TCP_ADDR", "10.0.0.20",
			"MY_DB_PORT_9000_UDP", "udp://10.0.0.20:9000", "MY_DB_PORT_9000_UDP_PROTO", "udp", "MY_DB_PORT_9000_UDP_PORT", "9000", "MY_DB_PORT_9000_UDP_ADDR", "10.0.0.20"),
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := basePod(tt.env, tt.from)
			p.Spec.EnableServiceLinks = ptr.To(tt.links)
			got := envOf(t, p, world())
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("env:\n got %v\nwant %v", got, tt.want)
			}
		})
	}
}

func TestExpand(t *testing.T) {
	vars := map[string]string{"A": "a", "EMPTY": ""}
	mapping := func(n string) (string, bool) { v, ok := vars[n]; return v, ok }
	for in, want := range map[string]string{
		"$(A)":        "a",
		"$(A)$(A)":    "aa",
		"$$(A)":       "$(A)",
		"$$$(A)":      "$a",
		"$(EMPTY)x":   "x",
		"$(B)":        "$(B)",
		"$(":          "$(",
		"$(A":         "$(A",
		"$":           "$",
		"a$b":         "a$b",
		"()":          "()",
		"$()":         "$()",
		"x$$":         "x$",
		"$(A)$$(A)$A": "a$(A)$A",
	} {
		if got := expand(in, mapping); got != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestMissingReferences(t *testing.T) {
	cmKey := func(name, key string) corev1.EnvVar {
		return corev1.EnvVar{Name: "X", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}}}
	}
	secKey := func(name, key string) corev1.EnvVar {
		return corev1.EnvVar{Name: "X", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}}}
	}
	tests := []struct {
		name    string
		env     []corev1.EnvVar
		from    []corev1.EnvFromSource
		volumes []corev1.Volume
		want    MissingError
		msg     string
	}{
		{name: "secret", env: []corev1.EnvVar{secKey("foo", "k")},
			want: MissingError{Kind: "Secret", Namespace: "ns", Name: "foo"}, msg: `secret "foo" not found`},
		{name: "configmap", env: []corev1.EnvVar{cmKey("foo", "k")},
			want: MissingError{Kind: "ConfigMap", Namespace: "ns", Name: "foo"}, msg: `configmap "foo" not found`},
		{name: "configmap key", env: []corev1.EnvVar{cmKey("cm", "k")},
			want: MissingError{Kind: "ConfigMap", Namespace: "ns", Name: "cm", Key: "k"}, msg: `couldn't find key k in ConfigMap ns/cm`},
		{name: "secret key", env: []corev1.EnvVar{secKey("sec", "k")},
			want: MissingError{Kind: "Secret", Namespace: "ns", Name: "sec", Key: "k"}, msg: `couldn't find key k in Secret ns/sec`},
		{name: "envFrom secret", from: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "foo"}}}},
			want: MissingError{Kind: "Secret", Namespace: "ns", Name: "foo"}, msg: `secret "foo" not found`},
		{name: "configMap volume", volumes: []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "foo"}}}}},
			want: MissingError{Kind: "ConfigMap", Namespace: "ns", Name: "foo", Volume: "v"}, msg: `volume "v": configmap "foo" not found`},
		{name: "secret volume item", volumes: []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "sec", Items: []corev1.KeyToPath{{Key: "k", Path: "k"}}}}}},
			want: MissingError{Kind: "Secret", Namespace: "ns", Name: "sec", Key: "k", Volume: "v"}, msg: `volume "v": couldn't find key k in Secret ns/sec`},
		{name: "projected configMap", volumes: []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}}}}}}}},
			want: MissingError{Kind: "ConfigMap", Namespace: "ns", Name: "kube-root-ca.crt", Volume: "v"}, msg: `volume "v": configmap "kube-root-ca.crt" not found`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := basePod(tt.env, tt.from)
			p.Spec.Volumes = tt.volumes
			_, _, err := resolvePod(p, world(), everything)
			var m *MissingError
			if !errors.As(err, &m) {
				t.Fatalf("error %v is not a *MissingError", err)
			}
			if *m != tt.want || m.Error() != tt.msg {
				t.Errorf("got %#v %q, want %#v %q", *m, m.Error(), tt.want, tt.msg)
			}
		})
	}
}

func TestOptionalMissingIsNoted(t *testing.T) {
	p := basePod([]corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "foo"}, Key: "k", Optional: ptr.To(true)}}}}, nil)
	p.Spec.Volumes = []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: "bar"}, Optional: ptr.To(true)}}}}
	rp, notes, err := resolvePod(p, world(), everything)
	if err != nil {
		t.Fatal(err)
	}
	want := []note{
		{"Normal", "OptionalSecretNotFound", "Optional Secret ns/foo not found; skipped in the environment of container c"},
		{"Normal", "OptionalConfigMapNotFound", "Optional ConfigMap ns/bar not found; skipped in a volume"},
	}
	if !reflect.DeepEqual(notes, want) {
		t.Errorf("notes = %v, want %v", notes, want)
	}
	if got := rp.Volumes["v"]; got == nil || len(got.Files) != 0 {
		t.Errorf("optional missing volume = %v, want an empty volume", got)
	}
}

func file(path, data string, mode int32) provider.VolumeFile {
	return provider.VolumeFile{Path: path, Data: []byte(data), Mode: mode}
}

func TestVolumes(t *testing.T) {
	p := basePod(nil, nil)
	p.Spec.Volumes = []corev1.Volume{
		{Name: "cm-all", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}, DefaultMode: ptr.To[int32](0o640)}}},
		{Name: "cm-items", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: "cm"},
			Items:                []corev1.KeyToPath{{Key: "color", Path: "conf/color.txt", Mode: ptr.To[int32](0o400)}, {Key: "size", Path: "size"}, {Key: "nope", Path: "nope"}},
			Optional:             ptr.To(true)}}},
		{Name: "sec", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "sec"}}},
		{Name: "dapi", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
			{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
			{Path: "annotations", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations"}},
			{Path: "name", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}, Mode: ptr.To[int32](0o600)},
			{Path: "mem", ResourceFieldRef: &corev1.ResourceFieldSelector{ContainerName: "c", Resource: "limits.memory", Divisor: resource.MustParse("1Mi")}},
			{Path: "cpu", ResourceFieldRef: &corev1.ResourceFieldSelector{ContainerName: "c", Resource: "limits.cpu", Divisor: resource.MustParse("1m")}},
		}}}},
		{Name: "proj", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{DefaultMode: ptr.To[int32](0o444), Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", Audience: "vault", ExpirationSeconds: ptr.To[int64](1200)}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}, Items: []corev1.KeyToPath{{Key: "color", Path: "color"}}}},
			{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "sec"}, Items: []corev1.KeyToPath{{Key: "user", Path: "user", Mode: ptr.To[int32](0o400)}}}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}}},
		}}}},
		{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}
	rp, _, err := resolvePod(p, world(), everything)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]*provider.VolumeContents{
		"cm-all":   {Files: []provider.VolumeFile{file("1bad-key", "x", 0o640), {Path: "bin", Data: []byte{0, 1, 2}, Mode: 0o640}, file("color", "blue", 0o640), file("size", "L", 0o640)}},
		"cm-items": {Files: []provider.VolumeFile{file("conf/color.txt", "blue", 0o400), file("size", "L", 0o644)}},
		"sec":      {Files: []provider.VolumeFile{file("password", "s3cr3t", 0o644), file("user", "admin", 0o644)}},
		"dapi": {Files: []provider.VolumeFile{file("annotations", `note="say \"hi\""`, 0o644), file("cpu", "4000", 0o644),
			file("labels", "app=\"web\"\ntier=\"front\"", 0o644), file("mem", "64", 0o644), file("name", "p", 0o600)}},
		"proj": {Files: []provider.VolumeFile{file("color", "blue", 0o444), file("namespace", "ns", 0o444),
			file("token", "token:vault:1200", 0o444), file("user", "admin", 0o400)}},
	}
	if !reflect.DeepEqual(rp.Volumes, want) {
		for k, v := range rp.Volumes {
			t.Logf("%s: %+v", k, v.Files)
		}
		t.Errorf("volumes differ from the expected")
	}

	// Without tokens (a plain provider's check) the token file is left out.
	rp, _, err = resolvePod(p, world(), parts{volumes: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(rp.Volumes["proj"].Files); got != 3 {
		t.Errorf("files of proj without tokens = %d, want 3", got)
	}
}

func TestPullCredentials(t *testing.T) {
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	src := world()
	src.secrets["ns/json"] = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "json"}, Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{".dockerconfigjson": []byte(`{"auths":{"registry.example.com":{"auth":"` + b64("alice:pw1") + `"},` +
			`"https://index.docker.io/v1/":{"username":"bob","password":"pw2"},"tok.example.com":{"identitytoken":"idt"}}}`)}}
	src.secrets["ns/cfg"] = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cfg"}, Type: corev1.SecretTypeDockercfg,
		Data: map[string][]byte{".dockercfg": []byte(`{"quay.io":{"username":"carol","password":"pw3","email":"c@example.com"}}`)}}
	p := basePod(nil, nil)
	p.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "json"}, {Name: "missing"}, {Name: ""}, {Name: "cfg"}}
	rp, notes, err := resolvePod(p, src, parts{pull: true})
	if err != nil {
		t.Fatal(err)
	}
	want := []provider.RegistryCredential{
		{Registry: "https://index.docker.io/v1/", Username: "bob", Password: "pw2", Auth: "Ym9iOnB3Mg=="},
		{Registry: "registry.example.com", Username: "alice", Password: "pw1", Auth: "YWxpY2U6cHcx"},
		{Registry: "tok.example.com", IdentityToken: "idt"},
		{Registry: "quay.io", Username: "carol", Password: "pw3", Auth: "Y2Fyb2w6cHcz"},
	}
	if !reflect.DeepEqual(rp.PullCredentials, want) {
		t.Errorf("credentials:\n got %+v\nwant %+v", rp.PullCredentials, want)
	}
	wantNotes := []note{{"Warning", "FailedToRetrieveImagePullSecret", "Unable to retrieve some image pull secrets (missing); attempting to pull the image may not succeed."}}
	if !reflect.DeepEqual(notes, wantNotes) {
		t.Errorf("notes = %v, want %v", notes, wantNotes)
	}
}

func TestTokenRefreshWindow(t *testing.T) {
	issued := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	eligible, due, period := refreshWindow(issued, time.Hour)
	if eligible.Sub(issued) != 9*time.Minute || due.Sub(issued) != 48*time.Minute || period != 36*time.Minute {
		t.Errorf("1h token: eligible after %s, due after %s, period %s; want 9m, 48m, 36m", eligible.Sub(issued), due.Sub(issued), period)
	}
	if _, due, _ := refreshWindow(issued, 48*time.Hour); due.Sub(issued) != 24*time.Hour {
		t.Errorf("a 48h token is due %s after issue, want 24h (the kubelet's bound)", due.Sub(issued))
	}
}

func TestMissingReferencesCarryUpstreamReasons(t *testing.T) {
	for _, tt := range []struct {
		err  *MissingError
		want string
	}{
		{&MissingError{Kind: "ConfigMap", Name: "a"}, "MandatoryConfigMapNotFound"},
		{&MissingError{Kind: "ConfigMap", Name: "a", Key: "k"}, "MandatoryConfigMapKeyNotFound"},
		{&MissingError{Kind: "Secret", Name: "a"}, "MandatorySecretNotFound"},
		{&MissingError{Kind: "Secret", Name: "a", Key: "k"}, "MandatorySecretKeyNotFound"},
	} {
		if got := tt.err.Reason(); got != tt.want {
			t.Errorf("%v: reason %q, want %q", tt.err, got, tt.want)
		}
	}
}
