package remote_test

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"

	"github.com/vkubelet/vkubelet/providers/mock"
	pb "github.com/vkubelet/vkubelet/providers/remote/api/v1alpha1"
)

// rawClient is a bare protocol client of endpoint: what an agent of any
// version sends, field by field.
func rawClient(t *testing.T, endpoint string) pb.ProviderClient {
	t.Helper()
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewProviderClient(conn)
}

// firstNotice opens WatchPods with req and returns the first pod sent.
func firstNotice(t *testing.T, c pb.ProviderClient, req *pb.WatchPodsRequest) *corev1.Pod {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := c.WatchPods(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	m, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{}
	if err := pod.Unmarshal(m.GetPod()); err != nil {
		t.Fatal(err)
	}
	return pod
}

// An agent from before status_only gets whole pods, as it always did; one that
// asks for statuses only gets each pod's identity and status alone.
func TestWatchPodsSendsWholePodsUnlessAskedForStatusesOnly(t *testing.T) {
	m, err := mock.New(mock.Config{}, "n")
	if err != nil {
		t.Fatal(err)
	}
	rp := benchPod(1)
	if err := m.CreateResolvedPod(context.Background(), rp); err != nil {
		t.Fatal(err)
	}
	c := rawClient(t, serve(t, m, "mock"))

	whole := firstNotice(t, c, &pb.WatchPodsRequest{})
	if len(whole.Spec.Containers) != 1 || whole.Labels["app"] != "web" || whole.Status.Phase != corev1.PodRunning {
		t.Errorf("without status_only: %d containers, labels %v, phase %s; want the whole pod", len(whole.Spec.Containers), whole.Labels, whole.Status.Phase)
	}
	slim := firstNotice(t, c, &pb.WatchPodsRequest{StatusOnly: true})
	if slim.Namespace != rp.Pod.Namespace || slim.Name != rp.Pod.Name || slim.UID != rp.Pod.UID || slim.Status.Phase != corev1.PodRunning {
		t.Errorf("with status_only: %s/%s %s %s, want the pod's identity and Running", slim.Namespace, slim.Name, slim.UID, slim.Status.Phase)
	}
	if len(slim.Spec.Containers) != 0 || slim.Labels != nil {
		t.Errorf("with status_only the spec or labels came along: %d containers, labels %v", len(slim.Spec.Containers), slim.Labels)
	}
}

// StopPod deletes the pod and answers its status in the same call: gone, for a
// mock that stops pods at once; NOT_FOUND for a pod it never had, as DeletePod.
func TestStopPodAnswersThePodsStatus(t *testing.T) {
	ctx := context.Background()
	m, err := mock.New(mock.Config{}, "n")
	if err != nil {
		t.Fatal(err)
	}
	rp := benchPod(2)
	if err := m.CreateResolvedPod(ctx, rp); err != nil {
		t.Fatal(err)
	}
	endpoint := serve(t, m, "mock")
	c := rawClient(t, endpoint)
	caps, err := c.Capabilities(ctx, &pb.CapabilitiesRequest{ProtocolVersion: "v1alpha1"})
	if err != nil || !caps.GetStopPod() {
		t.Fatalf("capabilities: stop_pod %v, %v", caps.GetStopPod(), err)
	}
	data, err := rp.Pod.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.StopPod(ctx, &pb.PodRequest{Pod: data})
	if err != nil || !resp.GetGone() {
		t.Errorf("StopPod: gone %v, %v; want gone", resp.GetGone(), err)
	}
	if n := m.DeleteCalls(rp.Pod.UID); n != 1 {
		t.Errorf("the mock got %d deletes, want 1", n)
	}
	_, err = c.StopPod(ctx, &pb.PodRequest{Pod: data})
	if status.Code(err) != codes.NotFound {
		t.Errorf("StopPod of a pod the provider does not have: %v, want NOT_FOUND", err)
	}
}
