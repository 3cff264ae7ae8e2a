package interlink_test

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vkubelet/vkubelet/errdefs"
	"github.com/vkubelet/vkubelet/internal/lab/interlinkplugin"
	"github.com/vkubelet/vkubelet/provider"
	"github.com/vkubelet/vkubelet/providers/interlink"
	"github.com/vkubelet/vkubelet/providers/mock"
	"github.com/vkubelet/vkubelet/providers/providerutil"
)

// A node whose state file is lost (its pod replaced by a helm upgrade, the
// file in an emptyDir) takes back the pods the plugin still runs instead of
// submitting them again, and stops them when they are deleted; a pod the plugin
// does not run is submitted, or taken as stopped; while the plugin cannot be
// asked, a deletion is not taken as done.
func TestANodeThatLostItsStateFileNeitherSubmitsTwiceNorForgetsAPod(t *testing.T) {
	ctx := context.Background()
	m, err := mock.New(mock.Config{}, "node")
	if err != nil {
		t.Fatal(err)
	}
	plugin := interlinkplugin.New(m, "")
	srv := httptest.NewServer(plugin)
	defer srv.Close()
	newProvider := func(url string) *interlink.Provider {
		t.Helper()
		p, err := interlink.New(interlink.Config{URL: url, StateFile: filepath.Join(t.TempDir(), "state.json"),
			Timeout: providerutil.Duration{Duration: 5 * time.Second}}, "node", slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	pod := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-0123456789-" + name)},
			Spec: corev1.PodSpec{NodeName: "node", Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	}
	first := newProvider(srv.URL)
	running, deleted := pod("p-1"), pod("p-2")
	for _, p := range []*corev1.Pod{running, deleted} {
		if err := first.CreateResolvedPod(ctx, &provider.ResolvedPod{Pod: p}); err != nil {
			t.Fatal(err)
		}
	}

	second := newProvider(srv.URL) // a state file of its own: empty
	if err := second.CreateResolvedPod(ctx, &provider.ResolvedPod{Pod: running}); err != nil {
		t.Fatal(err)
	}
	if _, creates, _ := plugin.Submitted(running.UID); creates != 1 {
		t.Errorf("a pod the plugin runs was submitted %d times, want 1", creates)
	}
	if _, err := second.GetPod(ctx, "ns", "p-1"); err != nil {
		t.Errorf("the pod taken back: %v", err)
	}
	if err := second.DeletePod(ctx, deleted); err != nil {
		t.Fatalf("deleting a pod the plugin runs and the state file lacks: %v", err)
	}
	if _, _, deletes := plugin.Submitted(deleted.UID); deletes != 1 {
		t.Errorf("the plugin was asked to delete it %d times, want 1", deletes)
	}

	fresh := pod("p-3")
	if err := second.DeletePod(ctx, fresh); !errdefs.IsNotFound(err) {
		t.Errorf("deleting a pod the plugin does not run: %v, want NotFound", err)
	}
	if err := second.CreateResolvedPod(ctx, &provider.ResolvedPod{Pod: fresh}); err != nil {
		t.Fatal(err)
	}
	if _, creates, _ := plugin.Submitted(fresh.UID); creates != 1 {
		t.Errorf("a new pod was submitted %d times, want 1", creates)
	}

	srv.Close()
	unreachable := newProvider(srv.URL)
	if err := unreachable.DeletePod(ctx, running); err == nil || errdefs.IsNotFound(err) {
		t.Errorf("deleting with the plugin unreachable: %v, want an error other than NotFound", err)
	}
}
