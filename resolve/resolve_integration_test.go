package resolve_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/lab/controlplane"
	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/provider"
	"github.com/vkubelet/vkubelet/resolve"
)

func TestMain(m *testing.M) {
	// The controller-manager creates the default ServiceAccounts and publishes
	// kube-root-ca.crt in every namespace.
	testenv.Main(m, controlplane.Config{ControllerManager: true})
}

// fixture is a resolver for a node of its own, against the test control plane.
type fixture struct {
	t        *testing.T
	c        kubernetes.Interface
	ns, node string
	r        *resolve.Resolver
	changed  chan string
}

func newFixture(t *testing.T) *fixture { t.Helper(); return newFixtureWith(t, testenv.Client(t)) }

// newFixtureWith is newFixture with the resolver's client c.
func newFixtureWith(t *testing.T, c kubernetes.Interface) *fixture {
	t.Helper()
	f := &fixture{t: t, c: c, ns: testenv.Namespace(t), changed: make(chan string, 100)}
	f.node = "resolve-" + f.ns
	ctx := context.Background()
	_, err := f.c.CoreV1().Nodes().Create(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: f.node},
		Status: corev1.NodeStatus{
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.10"}, {Type: corev1.NodeHostName, Address: f.node}},
			Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi"),
				corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"), corev1.ResourcePods: resource.MustParse("110")},
			Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi"),
				corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"), corev1.ResourcePods: resource.MustParse("110")},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.c.CoreV1().Nodes().Delete(context.Background(), f.node, metav1.DeleteOptions{}) })
	f.r, err = resolve.New(resolve.Config{Client: f.c, NodeName: f.node, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		OnChange: func(key string) {
			select {
			case f.changed <- key:
			default:
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go f.r.Run(runCtx)
	testenv.Eventually(t, 60*time.Second, func() (bool, string) {
		_, err := f.c.CoreV1().ConfigMaps(f.ns).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		return err == nil, fmt.Sprintf("kube-root-ca.crt: %v", err)
	})
	return f
}

func (f *fixture) create(obj any) {
	f.t.Helper()
	ctx := context.Background()
	var err error
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		_, err = f.c.CoreV1().ConfigMaps(f.ns).Create(ctx, o, metav1.CreateOptions{})
	case *corev1.Secret:
		_, err = f.c.CoreV1().Secrets(f.ns).Create(ctx, o, metav1.CreateOptions{})
	case *corev1.Service:
		_, err = f.c.CoreV1().Services(f.ns).Create(ctx, o, metav1.CreateOptions{})
	}
	if err != nil {
		f.t.Fatal(err)
	}
}

// createPod creates the pod bound to the fixture's node and returns it as stored.
func (f *fixture) createPod(p *corev1.Pod) *corev1.Pod {
	f.t.Helper()
	p.Spec.NodeName = f.node
	if len(p.Spec.Containers) == 0 {
		p.Spec.Containers = []corev1.Container{{Name: "c", Image: "busybox"}}
	}
	out, err := f.c.CoreV1().Pods(f.ns).Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return out
}

func (f *fixture) waitChanged(key string) {
	f.t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case k := <-f.changed:
			if k == key {
				return
			}
		case <-timeout:
			f.t.Fatalf("OnChange(%s) never called", key)
		}
	}
}

// kubernetesEnv is what the `kubernetes` service of default gives every pod of the
// test control plane (service CIDR 10.0.0.0/24).
var kubernetesEnv = []string{
	"KUBERNETES_SERVICE_HOST=10.0.0.1", "KUBERNETES_SERVICE_PORT=443", "KUBERNETES_SERVICE_PORT_HTTPS=443",
	"KUBERNETES_PORT=tcp://10.0.0.1:443", "KUBERNETES_PORT_443_TCP=tcp://10.0.0.1:443",
	"KUBERNETES_PORT_443_TCP_PROTO=tcp", "KUBERNETES_PORT_443_TCP_PORT=443", "KUBERNETES_PORT_443_TCP_ADDR=10.0.0.1",
}

func envLines(env []corev1.EnvVar) []string {
	out := make([]string, 0, len(env))
	for _, e := range env {
		out = append(out, e.Name+"="+e.Value)
	}
	return out
}

func files(v *provider.VolumeContents) map[string]string {
	out := map[string]string{}
	if v == nil {
		return out
	}
	for _, f := range v.Files {
		out[fmt.Sprintf("%s %04o", f.Path, f.Mode)] = string(f.Data)
	}
	return out
}

func cmRef(name, key string, optional bool) *corev1.EnvVarSource {
	return &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key, Optional: ptr.To(optional)}}
}

func secretRef(name, key string) *corev1.EnvVarSource {
	return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}}
}

func field(path string) *corev1.EnvVarSource {
	return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: path}}
}

func res(r, divisor string) *corev1.EnvVarSource {
	return &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: r, Divisor: resource.MustParse(divisor)}}
}

// TestResolvesEverySourceLikeTheKubelet resolves a table of pods against the real API
// and compares with the environment and files a kubelet would give them, written
// out by hand.
func TestResolvesEverySourceLikeTheKubelet(t *testing.T) {
	f := newFixture(t)
	ns := f.ns
	f.create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app"},
		Data:       map[string]string{"color": "blue", "app.properties": "a=1\nb=2\n"},
		BinaryData: map[string][]byte{"logo.bin": {0xde, 0xad}}})
	f.create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db"},
		StringData: map[string]string{"user": "admin", "password": "s3cr3t"}})
	f.create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "regcred"}, Type: corev1.SecretTypeDockerConfigJson,
		StringData: map[string]string{".dockerconfigjson": `{"auths":{"registry.example.com":{"username":"alice","password":"pw","auth":"YWxpY2U6cHc="}}}`}})
	f.create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "oldcred"}, Type: corev1.SecretTypeDockercfg,
		StringData: map[string]string{".dockercfg": `{"quay.io":{"auth":"Ym9iOnB3Mg=="}}`}})
	f.create(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "my-db"}, Spec: corev1.ServiceSpec{ClusterIP: "10.0.0.123",
		Ports: []corev1.ServicePort{{Name: "sql", Port: 5432, Protocol: corev1.ProtocolTCP}}}})
	ca, err := os.ReadFile(testenv.ControlPlane(t).PKI.CACert)
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name       string
		pod        *corev1.Pod
		wantEnv    func(p *corev1.Pod) []string
		wantFiles  map[string]map[string]string
		wantCreds  []provider.RegistryCredential
		tokenPaths map[string]string // volume → path of a token file
	}{{
		name: "env: values, expansion, ConfigMap, Secret, downward API, resources, service links",
		pod: &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "env", Labels: map[string]string{"app": "web"}, Annotations: map[string]string{"team": "blue"}},
			Spec: corev1.PodSpec{AutomountServiceAccountToken: ptr.To(false), Containers: []corev1.Container{{
				Name: "c", Image: "busybox",
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")},
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}},
				EnvFrom: []corev1.EnvFromSource{{Prefix: "DB_", SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}}}},
				Env: []corev1.EnvVar{
					{Name: "GREETING", Value: "hello"},
					{Name: "MSG", Value: "$(GREETING) $(DB_user) $(MISSING) $$(GREETING) $(MY_DB_SERVICE_HOST)"},
					{Name: "COLOR", ValueFrom: cmRef("app", "color", false)},
					{Name: "NOPE", ValueFrom: cmRef("absent", "k", true)},
					{Name: "PASSWORD", ValueFrom: secretRef("db", "password")},
					{Name: "POD_NAME", ValueFrom: field("metadata.name")},
					{Name: "POD_NAMESPACE", ValueFrom: field("metadata.namespace")},
					{Name: "APP", ValueFrom: field("metadata.labels['app']")},
					{Name: "TEAM", ValueFrom: field("metadata.annotations['team']")},
					{Name: "NODE", ValueFrom: field("spec.nodeName")},
					{Name: "SA", ValueFrom: field("spec.serviceAccountName")},
					{Name: "HOST_IP", ValueFrom: field("status.hostIP")},
					{Name: "MEM_LIMIT_MI", ValueFrom: res("limits.memory", "1Mi")},
					{Name: "CPU_LIMIT", ValueFrom: res("limits.cpu", "1")},
					{Name: "CPU_REQUEST_M", ValueFrom: res("requests.cpu", "1m")},
				},
			}}},
		},
		wantEnv: func(p *corev1.Pod) []string {
			return append([]string{
				"DB_password=s3cr3t", "DB_user=admin",
				"GREETING=hello", "MSG=hello admin $(MISSING) $(GREETING) 10.0.0.123", "COLOR=blue", "PASSWORD=s3cr3t",
				"POD_NAME=env", "POD_NAMESPACE=" + ns, "APP=web", "TEAM=blue", "NODE=" + f.node, "SA=default",
				"HOST_IP=192.0.2.10", "MEM_LIMIT_MI=128", "CPU_LIMIT=4", "CPU_REQUEST_M=100",
			}, append(kubernetesEnv,
				"MY_DB_SERVICE_HOST=10.0.0.123", "MY_DB_SERVICE_PORT=5432", "MY_DB_SERVICE_PORT_SQL=5432",
				"MY_DB_PORT=tcp://10.0.0.123:5432", "MY_DB_PORT_5432_TCP=tcp://10.0.0.123:5432", "MY_DB_PORT_5432_TCP_PROTO=tcp",
				"MY_DB_PORT_5432_TCP_PORT=5432", "MY_DB_PORT_5432_TCP_ADDR=10.0.0.123")...)
		},
	}, {
		name: "enableServiceLinks false keeps only the kubernetes service",
		pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "nolinks"},
			Spec: corev1.PodSpec{AutomountServiceAccountToken: ptr.To(false), EnableServiceLinks: ptr.To(false)}},
		wantEnv: func(*corev1.Pod) []string { return kubernetesEnv },
	}, {
		name: "volumes: configMap, secret, downwardAPI, projected with token and kube-root-ca.crt, pull secrets",
		pod: &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "vols", Labels: map[string]string{"app": "web", "tier": "front"}},
			Spec: corev1.PodSpec{
				ImagePullSecrets: []corev1.LocalObjectReference{{Name: "regcred"}, {Name: "oldcred"}},
				Containers: []corev1.Container{{Name: "c", Image: "busybox",
					Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}}}},
				Volumes: []corev1.Volume{
					{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
						LocalObjectReference: corev1.LocalObjectReference{Name: "app"}}}},
					{Name: "config-items", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
						LocalObjectReference: corev1.LocalObjectReference{Name: "app"}, DefaultMode: ptr.To[int32](0o600),
						Items: []corev1.KeyToPath{{Key: "app.properties", Path: "conf/app.properties"}, {Key: "color", Path: "color", Mode: ptr.To[int32](0o400)}}}}},
					{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "db", DefaultMode: ptr.To[int32](0o440)}}},
					{Name: "optional", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "absent", Optional: ptr.To(true)}}},
					{Name: "podinfo", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
						{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
						{Path: "name", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}},
						{Path: "cpu_limit_m", ResourceFieldRef: &corev1.ResourceFieldSelector{ContainerName: "c", Resource: "limits.cpu", Divisor: resource.MustParse("1m")}},
						{Path: "mem_limit_gi", ResourceFieldRef: &corev1.ResourceFieldSelector{ContainerName: "c", Resource: "limits.memory", Divisor: resource.MustParse("1Gi")}},
					}}}},
					{Name: "vault", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
						{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "vault-token", Audience: "vault", ExpirationSeconds: ptr.To[int64](1200)}},
						{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}, Items: []corev1.KeyToPath{{Key: "user", Path: "db-user"}}}},
					}}}},
					{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				},
			},
		},
		wantFiles: map[string]map[string]string{
			"config":       {"app.properties 0644": "a=1\nb=2\n", "color 0644": "blue", "logo.bin 0644": "\xde\xad"},
			"config-items": {"conf/app.properties 0600": "a=1\nb=2\n", "color 0400": "blue"},
			"creds":        {"password 0440": "s3cr3t", "user 0440": "admin"},
			"optional":     {},
			"podinfo":      {"labels 0644": "app=\"web\"\ntier=\"front\"", "name 0644": "vols", "cpu_limit_m 0644": "500", "mem_limit_gi 0644": "8"},
			"vault":        {"db-user 0644": "admin"},
			// kube-api-access-*, added by the ServiceAccount admission plugin, is checked below.
		},
		tokenPaths: map[string]string{"vault": "vault-token"},
		wantCreds: []provider.RegistryCredential{
			{Registry: "registry.example.com", Username: "alice", Password: "pw", Auth: "YWxpY2U6cHc="},
			{Registry: "quay.io", Username: "bob", Password: "pw2", Auth: "Ym9iOnB3Mg=="},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := f.createPod(tt.pod)
			rp, err := f.r.Resolve(context.Background(), p)
			if err != nil {
				t.Fatal(err)
			}
			if tt.wantEnv != nil {
				if got, want := envLines(rp.Env["c"]), tt.wantEnv(p); !reflect.DeepEqual(got, want) {
					t.Errorf("env of c:\n got %q\nwant %q", got, want)
				}
			}
			for vol, want := range tt.wantFiles {
				got := files(rp.Volumes[vol])
				for v, path := range tt.tokenPaths {
					if v == vol {
						tok := got[path+" 0644"]
						if strings.Count(tok, ".") != 2 {
							t.Errorf("volume %s: %s is not a JWT: %q", vol, path, tok)
						}
						delete(got, path+" 0644")
					}
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("files of volume %s:\n got %q\nwant %q", vol, got, want)
				}
			}
			if tt.wantCreds != nil && !reflect.DeepEqual(rp.PullCredentials, tt.wantCreds) {
				t.Errorf("pull credentials:\n got %+v\nwant %+v", rp.PullCredentials, tt.wantCreds)
			}
			// Every pod that automounts gets kube-api-access-*: token, ca.crt, namespace.
			for _, v := range p.Spec.Volumes {
				if !strings.HasPrefix(v.Name, "kube-api-access-") {
					continue
				}
				got := files(rp.Volumes[v.Name])
				if got["ca.crt 0644"] != string(ca) || got["namespace 0644"] != ns || strings.Count(got["token 0644"], ".") != 2 || len(got) != 3 {
					t.Errorf("files of %s: %q", v.Name, got)
				}
			}
		})
	}
}

// TestMissingSecretNotifiesWhenItAppears: a pod that references a Secret that does
// not exist yet fails with a *MissingError, and OnChange names the pod once the
// Secret is created; after Release nothing is watched any more.
func TestMissingSecretNotifiesWhenItAppears(t *testing.T) {
	f := newFixture(t)
	p := f.createPod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "waits"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox",
			Env: []corev1.EnvVar{{Name: "TOKEN", ValueFrom: secretRef("later", "token")}}}}}})
	_, err := f.r.Resolve(context.Background(), p)
	var missing *resolve.MissingError
	if !errors.As(err, &missing) || missing.Error() != `secret "later" not found` {
		t.Fatalf("Resolve = %v, want a *MissingError `secret \"later\" not found`", err)
	}
	f.create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "later"}, StringData: map[string]string{"token": "abc"}})
	f.waitChanged(f.ns + "/waits")
	rp, err := f.r.Resolve(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if got := envLines(rp.Env["c"])[0]; got != "TOKEN=abc" {
		t.Errorf("first variable = %q, want TOKEN=abc", got)
	}
	f.r.Release(f.ns + "/waits")
}

// TestTokenIsBoundToThePod: a projected token is accepted by TokenReview as the
// pod's service account, carries the pod's name and UID, honours its audience and
// expiry, and is rejected once the pod is deleted.
// In both encodings a client may use: the agent's protobuf (the TokenRequest's
// answer read off its encoding) and JSON.
func TestTokenIsBoundToThePod(t *testing.T) {
	pb := rest.CopyConfig(testenv.ControlPlane(t).RESTConfig)
	pb.ContentType, pb.AcceptContentTypes = runtime.ContentTypeProtobuf, runtime.ContentTypeProtobuf
	protobuf, err := kubernetes.NewForConfig(pb)
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]kubernetes.Interface{"json": testenv.Client(t), "protobuf": protobuf} {
		t.Run(name, func(t *testing.T) { tokenIsBoundToThePod(t, newFixtureWith(t, c)) })
	}
}

func tokenIsBoundToThePod(t *testing.T, f *fixture) {
	p := f.createPod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "bound"},
		Spec: corev1.PodSpec{Volumes: []corev1.Volume{{Name: "aud", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
				Path: "token", Audience: "vault", ExpirationSeconds: ptr.To[int64](1200)}}}}}}}}})
	rp, err := f.r.Resolve(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	tok := string(rp.Volumes["aud"].Files[0].Data)
	claims := jwtClaims(t, tok)
	if got := claims.Exp - claims.Iat; got != 1200 {
		t.Errorf("token lifetime = %ds, want 1200s", got)
	}
	if !reflect.DeepEqual(claims.Aud, []string{"vault"}) {
		t.Errorf("token audience = %v, want [vault]", claims.Aud)
	}
	// Resolving again reuses the token: it is not due for refresh.
	rp2, err := f.r.Resolve(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	// It is rebuilt from the packed form kept, a third of its bytes or so
	// (internal/compact/tokenpack): what TokenReview accepts is that copy.
	reused := string(rp2.Volumes["aud"].Files[0].Data)
	if reused != tok {
		t.Errorf("a second resolution gave %q, want the first token %q", reused, tok)
	}
	if kept := resolve.KeptTokenBytes(f.r, p.Namespace+"/"+p.Name); kept == 0 || kept > len(tok)/2 {
		t.Errorf("a token of %d bytes is kept in %d, not packed", len(tok), kept)
	}
	reviewToken(t, f.c, reused, []string{"vault"}, p)
}

type claims struct {
	Exp, Iat int64
	Aud      []string
}

func jwtClaims(t *testing.T, tok string) claims {
	t.Helper()
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWT: %q", tok)
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var c claims
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

// reviewToken checks with the API server's TokenReview that tok authenticates as the
// pod's service account with the pod's name and UID, then deletes the pod and waits
// for the token to be rejected.
func reviewToken(t *testing.T, c kubernetes.Interface, tok string, audiences []string, p *corev1.Pod) {
	t.Helper()
	ctx := context.Background()
	review := func() *authenticationv1.TokenReviewStatus {
		r, err := c.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
			Spec: authenticationv1.TokenReviewSpec{Token: tok, Audiences: audiences}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return &r.Status
	}
	st := review()
	if !st.Authenticated {
		t.Fatalf("token rejected: %s", st.Error)
	}
	if want := "system:serviceaccount:" + p.Namespace + ":default"; st.User.Username != want {
		t.Errorf("username = %q, want %q", st.User.Username, want)
	}
	if got := st.User.Extra["authentication.kubernetes.io/pod-name"]; !reflect.DeepEqual([]string(got), []string{p.Name}) {
		t.Errorf("pod-name = %v, want [%s]", got, p.Name)
	}
	if got := st.User.Extra["authentication.kubernetes.io/pod-uid"]; !reflect.DeepEqual([]string(got), []string{string(p.UID)}) {
		t.Errorf("pod-uid = %v, want [%s]", got, p.UID)
	}
	if !reflect.DeepEqual(st.Audiences, audiences) {
		t.Errorf("audiences = %v, want %v", st.Audiences, audiences)
	}
	if err := c.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		st := review()
		return !st.Authenticated, fmt.Sprintf("token of deleted pod still authenticated as %q", st.User.Username)
	})
}
