package remote_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/providers/mock"
	"github.com/vkubelet/vkubelet/providers/remote"
	pb "github.com/vkubelet/vkubelet/providers/remote/api/v1alpha1"
)

// recordingProvider serves a provider through remote.Server and counts what
// crosses the wire. With old set it is a provider built against v1alpha1 before
// status_only and stop_pod: it does not claim stop_pod, answers StopPod
// UNIMPLEMENTED (as its generated stubs would) and sends whole pods whatever
// WatchPods asks.
type recordingProvider struct {
	*remote.Server
	old bool

	deletes, stops        atomic.Int64 // DeletePod and StopPod calls
	statusOnlyAsked       atomic.Bool  // a WatchPods asked for statuses only
	wholePods, statusOnly atomic.Int64 // notices sent with and without a spec
}

func (p *recordingProvider) Capabilities(ctx context.Context, req *pb.CapabilitiesRequest) (*pb.CapabilitiesResponse, error) {
	caps, err := p.Server.Capabilities(ctx, req)
	if err == nil && p.old {
		caps.StopPod = false
	}
	return caps, err
}

func (p *recordingProvider) DeletePod(ctx context.Context, req *pb.PodRequest) (*pb.Empty, error) {
	p.deletes.Add(1)
	return p.Server.DeletePod(ctx, req)
}

func (p *recordingProvider) StopPod(ctx context.Context, req *pb.PodRequest) (*pb.StopPodResponse, error) {
	if p.old {
		return nil, status.Error(codes.Unimplemented, "method StopPod not implemented")
	}
	p.stops.Add(1)
	return p.Server.StopPod(ctx, req)
}

func (p *recordingProvider) WatchPods(req *pb.WatchPodsRequest, stream grpc.ServerStreamingServer[pb.PodResponse]) error {
	if req.GetStatusOnly() {
		p.statusOnlyAsked.Store(true)
	}
	if p.old {
		req = &pb.WatchPodsRequest{} // a field it does not know
	}
	return p.Server.WatchPods(req, countingStream{stream, p})
}

// countingStream tells the notices sent with a pod's spec from those without.
type countingStream struct {
	grpc.ServerStreamingServer[pb.PodResponse]
	p *recordingProvider
}

func (s countingStream) Send(m *pb.PodResponse) error {
	pod := &corev1.Pod{}
	if err := pod.Unmarshal(m.GetPod()); err == nil {
		if len(pod.Spec.Containers) > 0 {
			s.p.wholePods.Add(1)
		} else {
			s.p.statusOnly.Add(1)
		}
	}
	return s.ServerStreamingServer.Send(m)
}

// serveRecording serves p on a unix socket until the test ends.
func serveRecording(t *testing.T, p *recordingProvider) string { return serveRecordingFor(t, p) }

func serveRecordingFor(t testing.TB, p *recordingProvider) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "vkcompat")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "p.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	pb.RegisterProviderServer(g, p)
	go func() { _ = g.Serve(l) }()
	t.Cleanup(g.Stop)
	return "unix://" + sock
}

// A provider built against v1alpha1 before status-only notices and StopPod
// (it ignores WatchPodsRequest.status_only and has no StopPod) still runs and
// stops a node's pods: the agent sends it DeletePod and reads statuses from its
// whole pods. A provider of this version is sent StopPod instead, never
// DeletePod, and notifies statuses without the pods' specs.
func TestProvidersOfEitherV1alpha1VintageRunAndStopPods(t *testing.T) {
	for _, tc := range []struct {
		name string
		old  bool
	}{
		{"v1alpha1 before status_only and stop_pod", true},
		{"v1alpha1 with status_only and stop_pod", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testenv.Client(t)
			ns := testenv.Namespace(t)
			ctx := context.Background()
			node := "compat-new"
			if tc.old {
				node = "compat-old"
			}
			m, err := mock.New(mock.Config{}, node)
			if err != nil {
				t.Fatal(err)
			}
			sctx, cancel := context.WithCancel(ctx)
			t.Cleanup(cancel)
			p := &recordingProvider{Server: remote.NewServer(sctx, m, "mock", slog.New(slog.NewTextHandler(io.Discard, nil))), old: tc.old}
			runRemoteNode(t, node, serveRecording(t, p))

			const pods = 3
			for i := range pods {
				pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p" + string(rune('a'+i))},
					Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "main", Image: "busybox"}}}}
				if _, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			for i := range pods {
				testenv.WaitPhase(t, ns, "p"+string(rune('a'+i)), corev1.PodRunning)
			}
			for i := range pods {
				if err := c.CoreV1().Pods(ns).Delete(ctx, "p"+string(rune('a'+i)), metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			testenv.Eventually(t, 60*time.Second, func() (bool, string) {
				left := 0
				for i := range pods {
					if _, err := c.CoreV1().Pods(ns).Get(ctx, "p"+string(rune('a'+i)), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
						left++
					}
				}
				inProvider, _ := m.GetPods(ctx)
				return left == 0 && len(inProvider) == 0, "pods left in the API and in the provider"
			})

			if !p.statusOnlyAsked.Load() {
				t.Error("the agent did not ask WatchPods for statuses only")
			}
			if tc.old {
				if p.stops.Load() != 0 || p.deletes.Load() < pods {
					t.Errorf("an old provider got %d StopPod and %d DeletePod calls, want 0 and %d or more", p.stops.Load(), p.deletes.Load(), pods)
				}
				if p.statusOnly.Load() != 0 || p.wholePods.Load() == 0 {
					t.Errorf("an old provider sent %d whole pods and %d statuses alone, want only whole pods", p.wholePods.Load(), p.statusOnly.Load())
				}
				return
			}
			if p.deletes.Load() != 0 || p.stops.Load() < pods {
				t.Errorf("a provider with stop_pod got %d DeletePod and %d StopPod calls, want 0 and %d or more", p.deletes.Load(), p.stops.Load(), pods)
			}
			if p.wholePods.Load() != 0 || p.statusOnly.Load() == 0 {
				t.Errorf("a provider asked for statuses only sent %d whole pods and %d statuses alone, want only statuses", p.wholePods.Load(), p.statusOnly.Load())
			}
		})
	}
}
