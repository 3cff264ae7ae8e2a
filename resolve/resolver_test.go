package resolve

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vkubelet/vkubelet/internal/lab/eventually"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	core "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

// tokenFixture is a resolver over a fake clientset whose TokenRequests return
// "t1", "t2", … valid for the seconds asked (600 by default), on a fake clock.
type tokenFixture struct {
	r       *Resolver
	client  *fake.Clientset
	clk     *clocktesting.FakeClock
	mu      sync.Mutex
	changed []string
	asked   []*authenticationv1.TokenRequest
}

func newTokenFixture(t *testing.T, objects ...runtime.Object) *tokenFixture {
	t.Helper()
	f := &tokenFixture{clk: clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))}
	client := fake.NewClientset(objects...)
	f.client = client
	client.PrependReactor("create", "serviceaccounts", func(a core.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "token" {
			return false, nil, nil
		}
		tr := a.(core.CreateAction).GetObject().(*authenticationv1.TokenRequest).DeepCopy()
		f.mu.Lock()
		f.asked = append(f.asked, tr.DeepCopy())
		n := len(f.asked)
		f.mu.Unlock()
		secs := ptr.Deref(tr.Spec.ExpirationSeconds, 3600)
		tr.Spec.ExpirationSeconds = &secs
		tr.Status = authenticationv1.TokenRequestStatus{Token: fmt.Sprintf("t%d", n),
			ExpirationTimestamp: metav1.NewTime(f.clk.Now().Add(time.Duration(secs) * time.Second))}
		return true, tr, nil
	})
	var err error
	f.r, err = New(Config{Client: client, NodeName: "vk", Clock: f.clk, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		OnChange: func(key string) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.changed = append(f.changed, key)
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.r.stop)
	return f
}

func (f *tokenFixture) changes() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.changed...)
}

func tokenPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "uid-1"},
		Spec: corev1.PodSpec{ServiceAccountName: "robot", Containers: []corev1.Container{{Name: "c"}},
			Volumes: []corev1.Volume{{Name: "tok", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
					Path: "token", Audience: "vault", ExpirationSeconds: ptr.To[int64](600)}}}}}}}},
	}
}

func tokenOf(t *testing.T, f *tokenFixture, p *corev1.Pod) string {
	t.Helper()
	vols, err := f.r.ResolveVolumes(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	return string(vols["tok"].Files[0].Data)
}

func TestTokenRequestIsBoundToThePod(t *testing.T) {
	f := newTokenFixture(t)
	tokenOf(t, f, tokenPod())
	if len(f.asked) != 1 {
		t.Fatalf("%d token requests, want 1", len(f.asked))
	}
	spec := f.asked[0].Spec
	want := authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: "p", UID: "uid-1"}
	if !reflect.DeepEqual(spec.Audiences, []string{"vault"}) || ptr.Deref(spec.ExpirationSeconds, 0) != 600 ||
		spec.BoundObjectRef == nil || *spec.BoundObjectRef != want {
		t.Errorf("token request %+v, want audience vault, 600s, bound to %+v", spec, want)
	}
}

func TestALoneTokenIsRefreshedAtAboutSixtyPercentOfItsLifetime(t *testing.T) {
	f := newTokenFixture(t)
	p := tokenPod() // a 600s token: eligible at 90s, due at 480s, period 360s
	if got := tokenOf(t, f, p); got != "t1" {
		t.Fatalf("first token = %q, want t1", got)
	}
	var sentAt time.Duration
	for elapsed := 30 * time.Second; elapsed <= 600*time.Second && sentAt == 0; elapsed += 30 * time.Second {
		f.clk.Step(30 * time.Second)
		f.r.checkTokens()
		if len(f.changes()) > 0 {
			sentAt = elapsed
		}
		if sentAt == 0 {
			if got := tokenOf(t, f, p); got != "t1" {
				t.Fatalf("token at %s, before the pod was sent for refresh = %q, want t1 reused", elapsed, got)
			}
		}
	}
	// The rate owed for one 600s token is one refresh per 360s.
	if sentAt != 360*time.Second {
		t.Fatalf("sent for refresh at %s, want 360s (60%%)", sentAt)
	}
	if got := f.changes(); len(got) != 1 || got[0] != "ns/p" {
		t.Fatalf("OnChange calls = %v, want [ns/p]", got)
	}
	if got := tokenOf(t, f, p); got != "t2" {
		t.Fatalf("token after the refresh = %q, want t2", got)
	}
	f.clk.Step(30 * time.Second)
	f.r.checkTokens()
	if got := f.changes(); len(got) != 1 {
		t.Errorf("OnChange calls after the refresh = %v, want no more", got)
	}
}

func TestAPastDueTokenIsRefreshedWhateverTheBudget(t *testing.T) {
	f := newTokenFixture(t)
	p := tokenPod()
	tokenOf(t, f, p)
	// No check ran for 490s (a stalled node): the token is past 80%.
	f.clk.Step(490 * time.Second)
	f.r.mu.Lock()
	f.r.refreshBudget = -5
	f.r.mu.Unlock()
	f.r.checkTokens()
	if got := f.changes(); len(got) != 1 {
		t.Fatalf("OnChange calls = %v, want the past-due pod", got)
	}
}

// refsPod references the ConfigMap "settings" (env) and the Secret "creds" (volume).
func refsPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "c", Env: []corev1.EnvVar{{Name: "MODE", ValueFrom: &corev1.EnvVarSource{
				ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}, Key: "mode"}}}}}},
			Volumes: []corev1.Volume{{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "creds"}}}},
		},
	}
}

func TestConfigMapsAndSecretsAreWatchedOneByOneWhilePodsReferenceThem(t *testing.T) {
	f := newTokenFixture(t,
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "settings"}, Data: map[string]string{"mode": "fast"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "unrelated"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "creds"}, Data: map[string][]byte{"password": []byte("x")}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "someone-elses"}},
	)
	caches := func() []storeKey {
		f.r.mu.Lock()
		defer f.r.mu.Unlock()
		var out []storeKey
		for k := range f.r.stores {
			out = append(out, k)
		}
		slices.SortFunc(out, func(a, b storeKey) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
		return out
	}
	for _, name := range []string{"a", "b"} {
		if err := f.r.Check(context.Background(), refsPod(name)); err != nil {
			t.Fatal(err)
		}
	}
	want := []storeKey{{kindConfigMap, "ns", "settings"}, {kindSecret, "ns", "creds"}, {kindService, "default", ""}, {kindService, "ns", ""}}
	if got := caches(); !reflect.DeepEqual(got, want) {
		t.Errorf("caches while two pods are resolved: %v, want %v", got, want)
	}
	f.r.Release("ns/a")
	if got := caches(); !reflect.DeepEqual(got, want) {
		t.Errorf("caches after one of the two pods is released: %v, want %v", got, want)
	}
	f.r.Release("ns/b")
	f.r.mu.Lock()
	defer f.r.mu.Unlock()
	if len(f.r.stores) != 0 || len(f.r.pods) != 0 {
		t.Errorf("after Release: %d caches, %d pods; want none", len(f.r.stores), len(f.r.pods))
	}
}

func TestACachedObjectIsReadByName(t *testing.T) {
	f := newTokenFixture(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "settings"}, Data: map[string]string{"mode": "fast"}})
	var selectors []string
	f.client.PrependReactor("list", "secrets", func(a core.Action) (bool, runtime.Object, error) {
		selectors = append(selectors, a.(core.ListAction).GetListRestrictions().Fields.String())
		return false, nil, nil
	})
	_ = f.r.Check(context.Background(), refsPod("a")) // the Secret is missing: a MissingError
	if !slices.Contains(selectors, "metadata.name=creds") {
		t.Errorf("secrets listed with field selectors %q, want metadata.name=creds (one object, as the Node authorizer allows)", selectors)
	}
}

func TestANewIncarnationOfAPodGetsItsOwnToken(t *testing.T) {
	f := newTokenFixture(t)
	p := tokenPod()
	if got := tokenOf(t, f, p); got != "t1" {
		t.Fatalf("first token = %q, want t1", got)
	}
	// The pod is deleted and made again under the same name: the token bound to
	// the first one must not be handed to the second.
	again := tokenPod()
	again.UID = "uid-2"
	if got := tokenOf(t, f, again); got != "t2" {
		t.Fatalf("token of the new incarnation = %q, want t2", got)
	}
	if got := f.asked[1].Spec.BoundObjectRef.UID; got != "uid-2" {
		t.Errorf("second token bound to %q, want uid-2", got)
	}
	f.r.Release("ns/p")
	// Released: nothing is due for refresh any more.
	f.clk.Step(time.Hour)
	f.r.checkTokens()
	if got := f.changes(); len(got) != 0 {
		t.Errorf("OnChange(%v) for a released pod", got)
	}
}

func TestContainersWithoutEnvironmentShareTheServiceVariables(t *testing.T) {
	api := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "kubernetes"},
		Spec: corev1.ServiceSpec{ClusterIP: "10.0.0.1", Ports: []corev1.ServicePort{{Name: "https", Port: 443}}}}
	f := newTokenFixture(t, api)
	pod := func(name string, env ...corev1.EnvVar) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name)},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Env: env}}}}
	}
	var envs []map[string][]corev1.EnvVar
	resolve := func(p *corev1.Pod) []corev1.EnvVar {
		t.Helper()
		rp, err := f.r.Resolve(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		envs = append(envs, rp.Env)
		return rp.Env["c"]
	}
	a, b := resolve(pod("a")), resolve(pod("b"))
	if reflect.ValueOf(envs[0]).UnsafePointer() != reflect.ValueOf(envs[1]).UnsafePointer() {
		t.Error("two pods of one template without variables hold two maps of environments")
	}
	if len(a) == 0 || a[0].Name != "KUBERNETES_SERVICE_HOST" || a[0].Value != "10.0.0.1" {
		t.Fatalf("env of a = %v, want the kubernetes service variables", a)
	}
	if &a[0] != &b[0] {
		t.Error("two containers without variables of their own hold two copies of the service variables")
	}
	own := resolve(pod("c", corev1.EnvVar{Name: "X", Value: "$(KUBERNETES_SERVICE_HOST)"}))
	if own[0].Name != "X" || own[0].Value != "10.0.0.1" || len(own) != len(a)+1 {
		t.Fatalf("env with a variable of its own = %v", own)
	}
	if &own[1] == &a[0] {
		t.Error("a container with variables of its own got the shared slice")
	}
	if reflect.ValueOf(envs[2]).UnsafePointer() == reflect.ValueOf(envs[0]).UnsafePointer() {
		t.Error("a pod with variables of its own got the shared map")
	}
}

func TestTokensOfABurstAreRefreshedAtAnEvenPaceAndInTime(t *testing.T) {
	f := newTokenFixture(t)
	const pods = 1200
	pod := func(i int) *corev1.Pod {
		p := tokenPod()
		p.Name, p.UID = fmt.Sprintf("p%d", i), types.UID(fmt.Sprintf("uid-%d", i))
		return p
	}
	for i := range pods {
		tokenOf(t, f, pod(i)) // 600s tokens, all issued at once
	}
	// One refresh per 360s per token: 1200 × 30s / 360s = 100 pods a check.
	const perCheck = 100
	refreshed := map[string]time.Duration{}
	// Until 80% of the first tokens' lifetime: each pod once. (Later the ones
	// refreshed first come round again, one period after their refresh.)
	for elapsed := 30 * time.Second; elapsed <= 480*time.Second && len(refreshed) < pods; elapsed += 30 * time.Second {
		f.clk.Step(30 * time.Second)
		before := len(f.changes())
		f.r.checkTokens()
		got := f.changes()[before:]
		if len(got) > perCheck+1 {
			t.Fatalf("check at %s sent %d pods for a token refresh, want at most %d", elapsed, len(got), perCheck+1)
		}
		if elapsed < 90*time.Second && len(got) > 0 {
			t.Fatalf("check at %s sent %d pods before 15%% of their tokens' lifetime", elapsed, len(got))
		}
		for _, k := range got {
			if _, again := refreshed[k]; again {
				if len(refreshed) < pods {
					t.Fatalf("%s sent again at %s (first at %s) while %d pods had not been sent", k, elapsed, refreshed[k], pods-len(refreshed))
				}
				continue
			}
			refreshed[k] = elapsed
			var i int
			fmt.Sscanf(k, "ns/p%d", &i)
			tokenOf(t, f, pod(i)) // the refresh the pod controller makes
		}
	}
	if len(refreshed) != pods {
		t.Fatalf("%d of %d pods refreshed by 80%% of their tokens' lifetime", len(refreshed), pods)
	}
}

func TestPodsWithEqualEnvironmentsShareOneMap(t *testing.T) {
	f := newTokenFixture(t)
	pod := func(name string, env ...corev1.EnvVar) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name)},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Env: env}}}}
	}
	envOf := func(p *corev1.Pod) map[string][]corev1.EnvVar {
		t.Helper()
		rp, err := f.r.Resolve(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		return rp.Env
	}
	same := func(a, b map[string][]corev1.EnvVar) bool {
		return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
	}
	level := corev1.EnvVar{Name: "LEVEL", Value: "info"}
	a, b := envOf(pod("a", level)), envOf(pod("b", level))
	if !same(a, b) {
		t.Error("two pods of one template with variables of their own hold two maps")
	}
	if other := envOf(pod("c", corev1.EnvVar{Name: "LEVEL", Value: "debug"})); same(a, other) || other["c"][0].Value != "debug" {
		t.Errorf("a pod with another value got %v", other["c"])
	}
	byName := corev1.EnvVar{Name: "POD", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}
	d, e := envOf(pod("d", byName)), envOf(pod("e", byName))
	if d["c"][0].Value != "d" || e["c"][0].Value != "e" {
		t.Fatalf("POD = %q and %q, want d and e", d["c"][0].Value, e["c"][0].Value)
	}
	if same(d, e) {
		t.Error("pods with their own names in their environments share a map")
	}
}

func TestShareableEnv(t *testing.T) {
	for name, c := range map[string]struct {
		spec corev1.PodSpec
		want bool
	}{
		"literal": {corev1.PodSpec{Containers: []corev1.Container{{Env: []corev1.EnvVar{{Name: "A", Value: "1"}}}}}, true},
		"configmap": {corev1.PodSpec{Containers: []corev1.Container{{Env: []corev1.EnvVar{{Name: "A", ValueFrom: &corev1.EnvVarSource{
			ConfigMapKeyRef: &corev1.ConfigMapKeySelector{Key: "k"}}}}}}}, true},
		"namespace": {corev1.PodSpec{Containers: []corev1.Container{{Env: []corev1.EnvVar{{Name: "A", ValueFrom: &corev1.EnvVarSource{
			FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}}}}}, true},
		"secret key": {corev1.PodSpec{Containers: []corev1.Container{{Env: []corev1.EnvVar{{Name: "A", ValueFrom: &corev1.EnvVarSource{
			SecretKeyRef: &corev1.SecretKeySelector{Key: "k"}}}}}}}, false},
		"secret in an init container": {corev1.PodSpec{InitContainers: []corev1.Container{{EnvFrom: []corev1.EnvFromSource{{
			SecretRef: &corev1.SecretEnvSource{}}}}}}, false},
		"pod IP": {corev1.PodSpec{Containers: []corev1.Container{{Env: []corev1.EnvVar{{Name: "A", ValueFrom: &corev1.EnvVarSource{
			FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}}}}}}, false},
		"pod UID": {corev1.PodSpec{Containers: []corev1.Container{{Env: []corev1.EnvVar{{Name: "A", ValueFrom: &corev1.EnvVarSource{
			FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.uid"}}}}}}}, false},
	} {
		if got := shareableEnv(&corev1.Pod{Spec: c.spec}); got != c.want {
			t.Errorf("%s: shareableEnv = %v, want %v", name, got, c.want)
		}
	}
}

// TestAnIdleNodeRefreshesTenThousandTokensUnderFiveASecond simulates three hours
// of an idle node whose 10,000 pods started together with the kubelet's default
// token (3607s): the refreshes it sends, check by check (every 30s), must stay
// under 5 a second, and each token must be refreshed before 80% of its lifetime.
func TestAnIdleNodeRefreshesTenThousandTokensUnderFiveASecond(t *testing.T) {
	f := newTokenFixture(t)
	const pods = 10000
	pod := func(i int) *corev1.Pod {
		p := tokenPod()
		p.Name, p.UID = fmt.Sprintf("p%d", i), types.UID(fmt.Sprintf("uid-%d", i))
		p.Spec.Volumes[0].Projected.Sources[0].ServiceAccountToken.ExpirationSeconds = ptr.To[int64](3607)
		return p
	}
	issued := make([]time.Time, pods)
	for i := range pods {
		tokenOf(t, f, pod(i))
		issued[i] = f.clk.Now()
	}
	start := f.clk.Now()
	var total, maxPerCheck int
	for f.clk.Since(start) < 3*time.Hour {
		f.clk.Step(30 * time.Second)
		before := len(f.changes())
		f.r.checkTokens()
		got := f.changes()[before:]
		total += len(got)
		maxPerCheck = max(maxPerCheck, len(got))
		for _, k := range got {
			var i int
			fmt.Sscanf(k, "ns/p%d", &i)
			if age := f.clk.Since(issued[i]); age > 3607*time.Second*8/10 {
				t.Fatalf("%s refreshed %s after its token was issued, past 80%%", k, age)
			}
			tokenOf(t, f, pod(i))
			issued[i] = f.clk.Now()
		}
	}
	peak := float64(maxPerCheck) / 30
	mean := float64(total) / (3 * 3600)
	t.Logf("10,000 pods, 3607s tokens, 3 hours: %d refreshes, %.2f a second on average, at most %.2f a second over a check", total, mean, peak)
	if peak >= 5 {
		t.Errorf("up to %.2f token refreshes a second, want under 5", peak)
	}
}

// Two nodes' resolvers sharing Caches watch a ConfigMap their pods reference
// once; a change of it reaches both; the watch runs while either still uses it.
func TestResolversSharingCachesWatchAReferencedObjectOnce(t *testing.T) {
	client := fake.NewClientset(
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "settings"}, Data: map[string]string{"mode": "fast"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "creds"}})
	caches := NewCaches(client)
	var mu sync.Mutex
	changed := map[string][]string{}
	resolver := func(node string) *Resolver {
		r, err := New(Config{Client: client, NodeName: node, Caches: caches, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			OnChange: func(key string) {
				mu.Lock()
				defer mu.Unlock()
				changed[node] = append(changed[node], key)
			}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	a, b := resolver("node-a"), resolver("node-b")
	if err := a.Check(context.Background(), refsPod("on-a")); err != nil {
		t.Fatal(err)
	}
	if err := b.Check(context.Background(), refsPod("on-b")); err != nil {
		t.Fatal(err)
	}
	running := func() int {
		caches.mu.Lock()
		defer caches.mu.Unlock()
		return len(caches.entries)
	}
	// settings, creds, and the Services of ns and default: once each.
	if n := running(); n != 4 {
		t.Errorf("%d informers for two nodes' pods referencing the same objects, want 4", n)
	}
	mu.Lock()
	changed = map[string][]string{} // what the informers' first lists reported
	mu.Unlock()
	if _, err := client.CoreV1().ConfigMaps("ns").Update(context.Background(),
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "settings"}, Data: map[string]string{"mode": "slow"}}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually.TrueEvery(t, 10*time.Second, 20*time.Millisecond, func() (bool, string) {
		mu.Lock()
		got := fmt.Sprint(changed["node-a"], changed["node-b"])
		mu.Unlock()
		return got == "[ns/on-a] [ns/on-b]", fmt.Sprintf("after the ConfigMap changed, the nodes were told %s, want [ns/on-a] [ns/on-b]", got)
	})
	a.Release("ns/on-a")
	if n := running(); n != 4 {
		t.Errorf("%d informers while node b's pod still references them, want 4", n)
	}
	b.stop()
	if n := running(); n != 0 {
		t.Errorf("%d informers once no resolver uses them, want 0", n)
	}
}

// Resolvers sharing Caches hand their pods one copy of a mounted ConfigMap
// value (the CA bundle every token volume mounts), kept while any pod of any of
// them references the ConfigMap.
func TestResolversSharingCachesShareMountedConfigMapBytes(t *testing.T) {
	client := fake.NewClientset(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "ca"}, Data: map[string]string{"ca.crt": "PEM"}})
	caches := NewCaches(client)
	mount := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}},
				Volumes: []corev1.Volume{{Name: "ca", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: "ca"}}}}}}}
	}
	var files [][]byte
	var resolvers []*Resolver
	for _, node := range []string{"node-a", "node-b"} {
		r, err := New(Config{Client: client, NodeName: node, Caches: caches, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		resolvers = append(resolvers, r)
		rp, err := r.Resolve(context.Background(), mount("on-"+node))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, rp.Volumes["ca"].Files[0].Data)
	}
	if string(files[0]) != "PEM" || &files[0][0] != &files[1][0] {
		t.Errorf("the two nodes' pods got %q at %p and %q at %p; want one copy", files[0], &files[0][0], files[1], &files[1][0])
	}
	resolvers[0].stop()
	resolvers[1].stop()
	caches.configMapBytes.mu.Lock()
	defer caches.configMapBytes.mu.Unlock()
	if n := len(caches.configMapBytes.byObject); n != 0 {
		t.Errorf("%d ConfigMaps' bytes kept once no pod references them, want 0", n)
	}
}

func TestObjectChangedNamesThePodsThatReferenceTheObject(t *testing.T) {
	f := newTokenFixture(t)
	a := objectKey{kindConfigMap, "ns", "a"}
	b := objectKey{kindSecret, "ns", "b"}
	set := func(key string, objects ...objectKey) {
		f.r.mu.Lock()
		defer f.r.mu.Unlock()
		p := f.r.pods.get(key)
		if p == nil {
			p = &podRefs{uid: types.UID(key)}
			ns, name, _ := strings.Cut(key, "/")
			f.r.pods.put(ns, name, p)
		}
		f.r.setObjectsLocked(p, objects)
	}
	// p1 and p2 share one list (set one after the other), p3 has a list of its
	// own, p4 another, p5 none.
	set("ns/p1", a)
	set("ns/p2", a)
	set("ns/p3", b, a)
	set("ns/p4", b)
	set("ns/p5")
	changed := func(o objectKey) []string {
		f.mu.Lock()
		f.changed = nil
		f.mu.Unlock()
		f.r.objectChanged(o)
		got := f.changes()
		slices.Sort(got)
		return got
	}
	if got, want := changed(a), []string{"ns/p1", "ns/p2", "ns/p3"}; !slices.Equal(got, want) {
		t.Errorf("a changed: OnChange(%v), want %v", got, want)
	}
	if got, want := changed(b), []string{"ns/p3", "ns/p4"}; !slices.Equal(got, want) {
		t.Errorf("b changed: OnChange(%v), want %v", got, want)
	}
	if got := changed(objectKey{kindConfigMap, "ns", "other"}); len(got) != 0 {
		t.Errorf("an object no pod references changed: OnChange(%v), want none", got)
	}
	// p2 no longer references a; p1 still does, through the list they shared.
	set("ns/p2", b)
	if got, want := changed(a), []string{"ns/p1", "ns/p3"}; !slices.Equal(got, want) {
		t.Errorf("a changed after p2 moved to b: OnChange(%v), want %v", got, want)
	}
}
