package remote_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/providers/mock"
)

// Over the provider protocol as in process: a StatefulSet's pod deleted on a
// node whose provider (a mock in another server, its stop 8 s past the grace
// period) confirms the stop late is replaced only once it stopped; the
// provider never runs the two at once.
func TestAStatefulSetsPodIsNeverRunTwiceOverTheProtocol(t *testing.T) {
	const node = "remote-at-most-one"
	dir, err := os.MkdirTemp("", "vkr") // unix socket paths are short
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "p.sock")
	p, err := mock.New(mock.Config{StopOverrun: mock.Duration{Duration: 8 * time.Second}}, node)
	if err != nil {
		t.Fatal(err)
	}
	serveAt(t, sock, p, "mock")
	runRemoteNode(t, node, "unix://"+sock)

	old, replacement := testenv.ReplaceStatefulSetPod(t, testenv.Namespace(t), node, corev1.PodSpec{
		Containers:                    []corev1.Container{{Name: "db", Image: "postgres"}},
		TerminationGracePeriodSeconds: ptr.To[int64](1),
	})
	if n := p.Overlaps(); n != 0 {
		t.Fatalf("the provider ran %d pods beside an earlier copy of the same name, want none", n)
	}
	t.Logf("replacement %s created after the old pod %s stopped in the provider", replacement, old)
}
