package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/prometheus/common/expfmt"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vkubelet/vkubelet/errdefs"
	"github.com/vkubelet/vkubelet/provider"
	"github.com/vkubelet/vkubelet/providers/providerutil"
	pb "github.com/vkubelet/vkubelet/providers/remote/api/v1alpha1"
)

// Server serves one in-process provider over the protocol: what `vkubelet
// provider serve` runs, and what a provider written in Go needs to run on its own.
// It finds the provider's optional parts by type assertion, as the agent does, and
// announces them in Capabilities.
type Server struct {
	pb.UnimplementedProviderServer
	p    provider.PodLifecycleHandler
	name string
	log  *slog.Logger

	pods  *fanOut[*corev1.Pod]  // WatchPods streams
	nodes *fanOut[*corev1.Node] // WatchNodeStatus streams
}

// NewServer wraps p. name is reported in Capabilities. The provider's
// notifications are registered at once and last until ctx ends.
func NewServer(ctx context.Context, p provider.PodLifecycleHandler, name string, log *slog.Logger) *Server {
	if log == nil {
		log = slog.Default()
	}
	s := &Server{p: p, name: name, log: log,
		pods:  newFanOut(func(p *corev1.Pod) string { return providerutil.PodKey(p.Namespace, p.Name) }),
		nodes: newFanOut(func(*corev1.Node) string { return "" })}
	if n, ok := p.(provider.PodNotifier); ok {
		n.NotifyPods(ctx, s.pods.publish)
	}
	if n, ok := p.(provider.NodeProvider); ok {
		n.NotifyNodeStatus(ctx, s.nodes.publish)
	}
	return s
}

// ServeOptions say how Serve listens.
type ServeOptions struct {
	// TLS, if set, secures a TCP listener (with ClientCAs set, clients must
	// present a certificate: mutual TLS). A unix socket needs none.
	TLS credentials.TransportCredentials
}

// streamWorkers is how many goroutines of the server take the calls that
// arrive, each keeping the stack it grew: without them gRPC starts a goroutine
// per call, whose stack grows again through the handler and the provider
// (runtime.newstack and copystack were 9 % of the CPU of BenchmarkCreatePod's
// unix-socket case). A call that finds every worker busy gets a goroutine of
// its own, as before, so a provider whose calls block (a container runtime's)
// is never held up by them; idle, they cost a parked goroutine each.
const streamWorkers = 16

// Serve serves s on l until ctx ends, then stops, letting calls in flight end.
func (s *Server) Serve(ctx context.Context, l net.Listener, o ServeOptions) error {
	opts := append(providerutil.TraceServerOptions(), grpc.InitialWindowSize(flowWindow), grpc.InitialConnWindowSize(flowWindow),
		grpc.NumStreamWorkers(streamWorkers))
	if o.TLS != nil {
		opts = append(opts, grpc.Creds(o.TLS))
	}
	g := grpc.NewServer(opts...)
	pb.RegisterProviderServer(g, s)
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			stopped := make(chan struct{})
			go func() { g.GracefulStop(); close(stopped) }()
			select {
			case <-stopped:
			case <-time.After(5 * time.Second): // streams that do not end (follow, exec)
				g.Stop()
			}
		case <-done:
		}
	}()
	err := g.Serve(l)
	close(done)
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

// encoding is what Go servers read and write: Kubernetes protobuf.
const encoding = pb.Encoding_ENCODING_PROTOBUF

func (s *Server) Capabilities(context.Context, *pb.CapabilitiesRequest) (*pb.CapabilitiesResponse, error) {
	_, notifier := s.p.(provider.PodNotifier)
	_, volumes := s.p.(provider.VolumeUpdater)
	_, node := s.p.(provider.NodeProvider)
	_, configurer := s.p.(provider.NodeConfigurer)
	_, logs := s.p.(provider.ContainerLogsProvider)
	_, exec := s.p.(provider.ContainerExecProvider)
	_, attach := s.p.(provider.ContainerAttachProvider)
	_, pf := s.p.(provider.PortForwardProvider)
	_, stats := s.p.(provider.StatsProvider)
	_, metrics := s.p.(provider.ResourceMetricsProvider)
	return &pb.CapabilitiesResponse{Encoding: encoding, PodNotifier: notifier, VolumeUpdater: volumes,
		NodeProvider: node, NodeConfigurer: configurer, Logs: logs, Exec: exec, Attach: attach,
		PortForward: pf, Stats: stats, Metrics: metrics, EphemeralContainers: provider.RunsEphemeralContainers(s.p),
		InPlaceResize: provider.ResizesInPlace(s.p), StopPod: true, ProviderName: s.name}, nil
}

// withPod decodes the request's pod and hands it to create or update: the
// resolved form if the provider takes it, else the plain pod.
func (s *Server) withPod(ctx context.Context, req *pb.PodRequest, resolved func(context.Context, *provider.ResolvedPod) error, plain func(context.Context, *corev1.Pod) error) (*pb.Empty, error) {
	rp, err := resolvedPod(encoding, req)
	if err != nil {
		return nil, toStatus(err)
	}
	if resolved != nil {
		return &pb.Empty{}, toStatus(resolved(ctx, rp))
	}
	return &pb.Empty{}, toStatus(plain(ctx, rp.Pod))
}

func (s *Server) CreatePod(ctx context.Context, req *pb.PodRequest) (*pb.Empty, error) {
	if h, ok := s.p.(provider.ResolvedPodHandler); ok {
		return s.withPod(ctx, req, h.CreateResolvedPod, nil)
	}
	return s.withPod(ctx, req, nil, s.p.CreatePod)
}

func (s *Server) UpdatePod(ctx context.Context, req *pb.PodRequest) (*pb.Empty, error) {
	if h, ok := s.p.(provider.ResolvedPodHandler); ok {
		return s.withPod(ctx, req, h.UpdateResolvedPod, nil)
	}
	return s.withPod(ctx, req, nil, s.p.UpdatePod)
}

func (s *Server) DeletePod(ctx context.Context, req *pb.PodRequest) (*pb.Empty, error) {
	return s.withPod(ctx, req, nil, s.p.DeletePod)
}

// StopPod deletes the pod and answers its status right after, as GetPodStatus
// would: every provider has both, so Server always serves it.
func (s *Server) StopPod(ctx context.Context, req *pb.PodRequest) (*pb.StopPodResponse, error) {
	rp, err := resolvedPod(encoding, req)
	if err != nil {
		return nil, toStatus(err)
	}
	if err := s.p.DeletePod(ctx, rp.Pod); err != nil {
		return nil, toStatus(err)
	}
	st, err := s.p.GetPodStatus(ctx, rp.Pod.Namespace, rp.Pod.Name)
	switch {
	case errdefs.IsNotFound(err):
		return &pb.StopPodResponse{Gone: true}, nil
	case err != nil || st == nil:
		// The delete was taken; the agent asks for the status itself.
		return &pb.StopPodResponse{}, nil
	}
	data, err := encode(encoding, st)
	if err != nil {
		return &pb.StopPodResponse{}, nil
	}
	return &pb.StopPodResponse{Status: data}, nil
}

func (s *Server) UpdatePodVolumes(ctx context.Context, req *pb.PodRequest) (*pb.Empty, error) {
	u, ok := s.p.(provider.VolumeUpdater)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "the provider keeps no volumes current")
	}
	return s.withPod(ctx, req, u.UpdatePodVolumes, nil)
}

func (s *Server) GetPod(ctx context.Context, ref *pb.PodRef) (*pb.PodResponse, error) {
	pod, err := s.p.GetPod(ctx, ref.GetNamespace(), ref.GetName())
	if err != nil {
		return nil, toStatus(err)
	}
	if pod == nil {
		return nil, status.Errorf(codes.NotFound, "pod %s/%s not found", ref.GetNamespace(), ref.GetName())
	}
	data, err := encode(encoding, pod)
	return &pb.PodResponse{Pod: data}, toStatus(err)
}

func (s *Server) GetPodStatus(ctx context.Context, ref *pb.PodRef) (*pb.PodStatusResponse, error) {
	st, err := s.p.GetPodStatus(ctx, ref.GetNamespace(), ref.GetName())
	if err != nil {
		return nil, toStatus(err)
	}
	if st == nil {
		return nil, status.Errorf(codes.NotFound, "pod %s/%s not found", ref.GetNamespace(), ref.GetName())
	}
	data, err := encode(encoding, st)
	return &pb.PodStatusResponse{Status: data}, toStatus(err)
}

func (s *Server) ListPods(ctx context.Context, _ *pb.ListPodsRequest) (*pb.ListPodsResponse, error) {
	pods, err := s.p.GetPods(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	out := &pb.ListPodsResponse{Pods: make([][]byte, 0, len(pods))}
	for _, p := range pods {
		data, err := encode(encoding, p)
		if err != nil {
			return nil, toStatus(err)
		}
		out.Pods = append(out.Pods, data)
	}
	return out, nil
}

// WatchPods sends every pod first (a client that reconnects may have missed
// changes), then each change the provider notifies, the newest of a pod only; to
// a client that asks for statuses only, each pod's identity and status alone.
func (s *Server) WatchPods(req *pb.WatchPodsRequest, stream grpc.ServerStreamingServer[pb.PodResponse]) error {
	if _, ok := s.p.(provider.PodNotifier); !ok {
		return status.Error(codes.Unimplemented, "the provider does not notify pod changes")
	}
	w := s.pods.subscribe()
	defer s.pods.unsubscribe(w)
	pods, err := s.p.GetPods(stream.Context())
	if err != nil {
		return toStatus(err)
	}
	send := func(p *corev1.Pod) error {
		if req.GetStatusOnly() {
			p = statusNotice(p)
		}
		data, err := encode(encoding, p)
		if err != nil {
			return toStatus(err)
		}
		return stream.Send(&pb.PodResponse{Pod: data})
	}
	for _, p := range pods {
		if err := send(p); err != nil {
			return err
		}
	}
	return w.drain(stream.Context(), send)
}

// statusNotice is what a client that asked for statuses only reads of a
// notified pod: its namespace, name, UID and status. Encoding it costs a
// fraction of the whole pod's encoding, and so does decoding it.
func statusNotice(p *corev1.Pod) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name, UID: p.UID}, Status: p.Status}
}

func (s *Server) Ping(ctx context.Context, _ *pb.PingRequest) (*pb.Empty, error) {
	if n, ok := s.p.(provider.NodeProvider); ok {
		return &pb.Empty{}, toStatus(n.Ping(ctx))
	}
	return &pb.Empty{}, nil
}

func (s *Server) ConfigureNode(ctx context.Context, req *pb.NodeRequest) (*pb.NodeResponse, error) {
	c, ok := s.p.(provider.NodeConfigurer)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "the provider does not configure the node")
	}
	node := &corev1.Node{}
	if err := decode(encoding, req.GetNode(), node); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "decoding the node: %v", err)
	}
	c.ConfigureNode(ctx, node)
	data, err := encode(encoding, node)
	return &pb.NodeResponse{Node: data}, toStatus(err)
}

func (s *Server) WatchNodeStatus(_ *pb.WatchNodeStatusRequest, stream grpc.ServerStreamingServer[pb.NodeResponse]) error {
	if _, ok := s.p.(provider.NodeProvider); !ok {
		return status.Error(codes.Unimplemented, "the provider reports no node status")
	}
	w := s.nodes.subscribe()
	defer s.nodes.unsubscribe(w)
	return w.drain(stream.Context(), func(n *corev1.Node) error {
		data, err := encode(encoding, n)
		if err != nil {
			return toStatus(err)
		}
		return stream.Send(&pb.NodeResponse{Node: data})
	})
}

// chunkSize is the most bytes one message of a byte stream carries.
const chunkSize = 32 << 10

func (s *Server) GetContainerLogs(req *pb.LogsRequest, stream grpc.ServerStreamingServer[pb.Chunk]) error {
	lp, ok := s.p.(provider.ContainerLogsProvider)
	if !ok {
		return status.Error(codes.Unimplemented, "the provider serves no logs")
	}
	opts, err := logOpts(req)
	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	rc, err := lp.GetContainerLogs(stream.Context(), req.GetNamespace(), req.GetPod(), req.GetContainer(), opts)
	if err != nil {
		return toStatus(err)
	}
	defer rc.Close()
	return toStatus(copyToStream(rc, func(b []byte) error { return stream.Send(&pb.Chunk{Data: b}) }))
}

// copyToStream sends what r reads, in chunks, until EOF.
func copyToStream(r io.Reader, send func([]byte) error) error {
	buf := make([]byte, chunkSize)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if serr := send(append([]byte(nil), buf[:n]...)); serr != nil {
				return serr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func (s *Server) GetStatsSummary(ctx context.Context, _ *pb.Empty) (*pb.ObjectResponse, error) {
	sp, ok := s.p.(provider.StatsProvider)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "the provider reports no stats")
	}
	sum, err := sp.GetStatsSummary(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	// The stats Summary has no protobuf form: always JSON.
	data, err := json.Marshal(sum)
	return &pb.ObjectResponse{Object: data}, toStatus(err)
}

func (s *Server) GetMetricsResource(ctx context.Context, _ *pb.Empty) (*pb.Chunk, error) {
	mp, ok := s.p.(provider.ResourceMetricsProvider)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "the provider reports no resource metrics")
	}
	fams, err := mp.GetMetricsResource(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range fams {
		if err := enc.Encode(f); err != nil {
			return nil, toStatus(err)
		}
	}
	return &pb.Chunk{Data: buf.Bytes()}, nil
}

// fanOut hands the newest value per key to every subscriber; a slow subscriber
// gets only the newest, never a queue.
type fanOut[T any] struct {
	key  func(T) string
	mu   sync.Mutex
	subs map[*subscriber[T]]bool
}

type subscriber[T any] struct {
	mu      sync.Mutex
	pending map[string]T
	order   []string
	wake    chan struct{}
}

func newFanOut[T any](key func(T) string) *fanOut[T] {
	return &fanOut[T]{key: key, subs: map[*subscriber[T]]bool{}}
}

func (f *fanOut[T]) publish(v T) {
	k := f.key(v)
	f.mu.Lock()
	defer f.mu.Unlock()
	for s := range f.subs {
		s.mu.Lock()
		if _, ok := s.pending[k]; !ok {
			s.order = append(s.order, k)
		}
		s.pending[k] = v
		s.mu.Unlock()
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

func (f *fanOut[T]) subscribe() *subscriber[T] {
	s := &subscriber[T]{pending: map[string]T{}, wake: make(chan struct{}, 1)}
	f.mu.Lock()
	f.subs[s] = true
	f.mu.Unlock()
	return s
}

func (f *fanOut[T]) unsubscribe(s *subscriber[T]) {
	f.mu.Lock()
	delete(f.subs, s)
	f.mu.Unlock()
}

// drain sends what is published, in order of first change, until ctx ends or a
// send fails.
func (s *subscriber[T]) drain(ctx context.Context, send func(T) error) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.wake:
		}
		s.mu.Lock()
		order, pending := s.order, s.pending
		s.order, s.pending = nil, map[string]T{}
		s.mu.Unlock()
		for _, k := range order {
			if err := send(pending[k]); err != nil {
				return err
			}
		}
	}
}

// errNoStart says a stream did not begin with its start message.
var errNoStart = errdefs.InvalidInput("the first message must be the start")
