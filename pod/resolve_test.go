package pod

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	core "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/lab/eventually"
	"github.com/vkubelet/vkubelet/provider"
)

// resolvingProvider is the fake provider taking resolved pods and volume updates.
type resolvingProvider struct {
	*fakeProvider
	rmu     sync.Mutex
	created []*provider.ResolvedPod
	volumes []*provider.ResolvedPod // UpdatePodVolumes calls
}

func (r *resolvingProvider) CreateResolvedPod(ctx context.Context, rp *provider.ResolvedPod) error {
	if err := r.CreatePod(ctx, rp.Pod); err != nil {
		return err
	}
	r.rmu.Lock()
	defer r.rmu.Unlock()
	r.created = append(r.created, rp)
	return nil
}

func (r *resolvingProvider) UpdateResolvedPod(ctx context.Context, rp *provider.ResolvedPod) error {
	return r.UpdatePod(ctx, rp.Pod)
}

func (r *resolvingProvider) UpdatePodVolumes(_ context.Context, rp *provider.ResolvedPod) error {
	r.rmu.Lock()
	defer r.rmu.Unlock()
	r.volumes = append(r.volumes, rp)
	return nil
}

func (r *resolvingProvider) volumeUpdates() []*provider.ResolvedPod {
	r.rmu.Lock()
	defer r.rmu.Unlock()
	return append([]*provider.ResolvedPod(nil), r.volumes...)
}

// startResolving is fixture.start with a resolving provider, TokenRequests answered
// with "t1", "t2", … valid for the seconds asked, and the resolver's token loop
// running on the fake clock.
func (f *fixture) startResolving() *resolvingProvider {
	f.t.Helper()
	tokens := 0
	f.client.PrependReactor("create", "serviceaccounts", func(a core.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "token" {
			return false, nil, nil
		}
		tr := a.(core.CreateAction).GetObject().(*authenticationv1.TokenRequest).DeepCopy()
		tokens++
		secs := ptr.Deref(tr.Spec.ExpirationSeconds, 3600)
		tr.Spec.ExpirationSeconds = &secs
		tr.Status = authenticationv1.TokenRequestStatus{Token: fmt.Sprintf("t%d", tokens),
			ExpirationTimestamp: metav1.NewTime(f.clock.Now().Add(time.Duration(secs) * time.Second))}
		return true, tr, nil
	})
	prov := &resolvingProvider{fakeProvider: f.provider}
	f.startWith(prov)
	return prov
}

// startWith builds the controller over prov, a provider that takes resolved pods, and
// runs its informer and resolver.
func (f *fixture) startWith(prov provider.PodLifecycleHandler) {
	f.t.Helper()
	c, err := NewController(Config{
		Client: f.client, NodeName: testNode, Provider: prov,
		Recorder: f.recorder, Clock: f.clock, StatusPollInterval: time.Second, TokenCheckInterval: 10 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.t.Cleanup(cancel)
	f.ctx = ctx
	c.informers.Start(ctx.Done())
	c.informers.WaitForCacheSync(ctx.Done())
	c.resolver.Start() // as Controller.Run does
	f.t.Cleanup(c.resolver.Stop)
	f.c = c
}

// waitStale waits until the controller has been told the pod's volumes changed.
func (f *fixture) waitStale(key string) {
	f.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if f.c.state.get(key).volumesStale {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	f.t.Fatalf("volumes of %s never marked stale", key)
}

func projectedPod() *corev1.Pod {
	p := newPod("a")
	p.Spec.Volumes = []corev1.Volume{{Name: "api", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](600)}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "conf"}}},
		}}}}}
	return p
}

func fileData(rp *provider.ResolvedPod, vol, path string) string {
	for _, f := range rp.Volumes[vol].Files {
		if f.Path == path {
			return string(f.Data)
		}
	}
	return ""
}

func TestTokenNearExpiryIsRefreshedThroughUpdatePodVolumes(t *testing.T) {
	f := newFixture(t, projectedPod(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "conf"}, Data: map[string]string{"k": "v"}})
	prov := f.startResolving()
	if err := f.c.syncHandler(f.ctx, "ns/a"); err != nil {
		t.Fatal(err)
	}
	if len(prov.created) != 1 || fileData(prov.created[0], "api", "token") != "t1" || fileData(prov.created[0], "api", "k") != "v" {
		t.Fatalf("created = %v, want one pod with token t1 and k=v", prov.created)
	}
	// Nothing changed: a sync calls nothing.
	if err := f.c.syncHandler(f.ctx, "ns/a"); err != nil {
		t.Fatal(err)
	}
	if n := len(prov.volumeUpdates()); n != 0 {
		t.Fatalf("%d volume updates with nothing changed", n)
	}
	// At 80% of the token's 600s the resolver flags the pod; the sync hands the new
	// token to the provider.
	f.clock.Step(481 * time.Second)
	f.waitStale("ns/a")
	if err := f.c.syncHandler(f.ctx, "ns/a"); err != nil {
		t.Fatal(err)
	}
	ups := prov.volumeUpdates()
	if len(ups) != 1 || fileData(ups[0], "api", "token") != "t2" || fileData(ups[0], "api", "k") != "v" {
		t.Fatalf("volume updates = %v, want one with token t2", ups)
	}
	if ups[0].Env == nil || len(ups[0].Env["c"]) != len(prov.created[0].Env["c"]) {
		t.Errorf("volume update env = %v, want the env the pod started with", ups[0].Env)
	}
}

func TestConfigMapChangeIsHandedToUpdatePodVolumes(t *testing.T) {
	f := newFixture(t, projectedPod(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "conf"}, Data: map[string]string{"k": "v"}})
	prov := f.startResolving()
	if err := f.c.syncHandler(f.ctx, "ns/a"); err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "conf"}, Data: map[string]string{"k": "v2"}}
	if _, err := f.client.CoreV1().ConfigMaps("ns").Update(f.ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The pod can be marked stale before the resolver's watch has brought the
	// change (by the watch's first listing of the ConfigMap): that sync finds
	// nothing new and hands nothing over. The change itself marks it again.
	eventually.True(t, 5*time.Second, func() (bool, string) {
		f.waitStale("ns/a")
		if err := f.c.syncHandler(f.ctx, "ns/a"); err != nil {
			t.Fatal(err)
		}
		return len(prov.volumeUpdates()) > 0, "no volume update handed over"
	})
	ups := prov.volumeUpdates()
	if len(ups) != 1 || fileData(ups[0], "api", "k") != "v2" || fileData(ups[0], "api", "token") != "t1" {
		t.Fatalf("volume updates = %v, want one with k=v2 and the same token", ups)
	}
}

func TestMissingConfigMapKeepsPodPendingWithoutCallingProvider(t *testing.T) {
	f := newFixture(t, projectedPod())
	prov := f.startResolving()
	if err := f.c.syncHandler(f.ctx, "ns/a"); err != nil {
		t.Fatal(err)
	}
	if got := prov.callList(); len(got) != 0 {
		t.Fatalf("provider calls = %v, want none", got)
	}
	if ev := <-f.recorder.Events; ev != `Warning MandatoryConfigMapNotFound Error: volume "api": configmap "conf" not found` {
		t.Errorf("event = %q", ev)
	}
	p, _ := f.client.CoreV1().Pods("ns").Get(f.ctx, "a", metav1.GetOptions{})
	if len(p.Status.ContainerStatuses) != 1 {
		t.Fatalf("container statuses = %v", p.Status.ContainerStatuses)
	}
	w := p.Status.ContainerStatuses[0].State.Waiting
	if p.Status.Phase != corev1.PodPending || w == nil || w.Reason != "CreateContainerConfigError" || w.Message != `volume "api": configmap "conf" not found` {
		t.Errorf("status = %s %+v", p.Status.Phase, p.Status.ContainerStatuses[0].State)
	}
}
