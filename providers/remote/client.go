// Package remote is vkubelet's provider protocol (api/v1alpha1/provider.proto):
// the provider contract of package provider over gRPC, so that a provider runs as
// a process of its own, written in any language.
//
// Client is `--provider remote`, the node agent's end: a provider.PodLifecycleHandler
// whose calls go to an endpoint (a unix socket, or TCP with TLS). Server is the
// other end around any in-process provider (`vkubelet provider serve`), and the
// package a Go provider author uses to serve. docs/PROVIDERS.md is the reference.
package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/vkubelet/vkubelet/errdefs"
	"github.com/vkubelet/vkubelet/provider"
	"github.com/vkubelet/vkubelet/providers/providerutil"
	pb "github.com/vkubelet/vkubelet/providers/remote/api/v1alpha1"
)

// flowWindow is the HTTP/2 flow-control window of both ends, per stream and
// per connection. Set, it turns off gRPC's window estimation, which pings the
// other end as data arrives (a frame each way, and a wake-up of each process,
// every few calls under load) to size a window that a provider's connection,
// a unix socket or a nearby host, does not need to grow beyond this.
const flowWindow = 1 << 20

// Client is a provider at the other end of a connection.
type Client struct {
	cfg  Config
	conn *grpc.ClientConn
	api  pb.ProviderClient
	node string
	log  *slog.Logger
	// capabilities, asked once and again whenever the provider comes back
	capsV atomic.Pointer[pb.CapabilitiesResponse]
	enc   pb.Encoding
	// stopped keeps what StopPod answered, for the GetPodStatus that follows
	// each delete
	stopped stopAnswers
}

// New connects to the provider of cfg and asks for its capabilities, waiting up
// to cfg.Timeout for it to answer.
func New(ctx context.Context, cfg Config, nodeName string, log *slog.Logger) (*Client, error) {
	if log == nil {
		log = slog.Default()
	}
	cfg = cfg.withDefaults()
	creds := insecure.NewCredentials()
	target := cfg.Endpoint
	if cfg.TLS != nil {
		if strings.HasPrefix(target, "unix://") {
			return nil, errors.New("remote provider: TLS is for TCP endpoints")
		}
		tc, err := clientTLS(cfg.TLS)
		if err != nil {
			return nil, err
		}
		creds = credentials.NewTLS(tc)
	}
	if !strings.Contains(target, "://") {
		target = "passthrough:///" + target
	}
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)),
		grpc.WithInitialWindowSize(flowWindow), grpc.WithInitialConnWindowSize(flowWindow)},
		providerutil.TraceDialOptions()...)
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		return nil, fmt.Errorf("remote provider %s: %w", cfg.Endpoint, err)
	}
	c := &Client{cfg: cfg, conn: conn, api: pb.NewProviderClient(conn), node: nodeName, log: log.With("provider", "remote", "endpoint", cfg.Endpoint)}
	cctx, cancel := context.WithTimeout(ctx, cfg.Timeout.Duration)
	defer cancel()
	if err := c.refreshCaps(cctx, grpc.WaitForReady(true)); err != nil {
		conn.Close()
		return nil, fmt.Errorf("remote provider %s: %w", cfg.Endpoint, err)
	}
	caps := c.caps()
	c.log.Info("connected", "name", caps.GetProviderName(), "encoding", caps.GetEncoding().String())
	return c, nil
}

func (c *Client) refreshCaps(ctx context.Context, opts ...grpc.CallOption) error {
	caps, err := c.api.Capabilities(ctx, &pb.CapabilitiesRequest{ProtocolVersion: ProtocolVersion, NodeName: c.node}, opts...)
	if err != nil {
		return fromStatus(err)
	}
	c.capsV.Store(caps)
	return nil
}

func (c *Client) caps() *pb.CapabilitiesResponse { return c.capsV.Load() }

// Capabilities are the provider's, as it last announced them.
func (c *Client) Capabilities() *pb.CapabilitiesResponse { return c.caps() }

func (c *Client) encoding() pb.Encoding {
	if c.caps().GetEncoding() == pb.Encoding_ENCODING_PROTOBUF {
		return pb.Encoding_ENCODING_PROTOBUF
	}
	return pb.Encoding_ENCODING_JSON
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// call bounds a unary call by the configured timeout.
func (c *Client) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.cfg.Timeout.Duration)
}

func (c *Client) send(ctx context.Context, rp *provider.ResolvedPod, rpc func(context.Context, *pb.PodRequest, ...grpc.CallOption) (*pb.Empty, error)) error {
	req, err := podRequest(c.encoding(), rp)
	if err != nil {
		return err
	}
	ctx, cancel := c.call(ctx)
	defer cancel()
	_, err = rpc(ctx, req)
	return fromStatus(err)
}

// CreateResolvedPod sends the pod with everything resolved.
func (c *Client) CreateResolvedPod(ctx context.Context, rp *provider.ResolvedPod) error {
	return c.send(ctx, rp, c.api.CreatePod)
}

// UpdateResolvedPod sends the pod's new version.
func (c *Client) UpdateResolvedPod(ctx context.Context, rp *provider.ResolvedPod) error {
	return c.send(ctx, rp, c.api.UpdatePod)
}

// CreatePod is never called by the controller (the client takes resolved pods);
// it sends the pod without resolution.
func (c *Client) CreatePod(ctx context.Context, pod *corev1.Pod) error {
	return c.CreateResolvedPod(ctx, &provider.ResolvedPod{Pod: pod})
}

// UpdatePod: as CreatePod.
func (c *Client) UpdatePod(ctx context.Context, pod *corev1.Pod) error {
	return c.UpdateResolvedPod(ctx, &provider.ResolvedPod{Pod: pod})
}

// DeletePod asks the provider to stop the pod. A provider that claims stop_pod
// answers the pod's status in the same call (StopPod), and the GetPodStatus the
// pod controller makes right after a delete is answered with it.
func (c *Client) DeletePod(ctx context.Context, pod *corev1.Pod) error {
	if !c.caps().GetStopPod() {
		return c.send(ctx, &provider.ResolvedPod{Pod: pod}, c.api.DeletePod)
	}
	req, err := podRequest(c.encoding(), &provider.ResolvedPod{Pod: pod})
	if err != nil {
		return err
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := c.api.StopPod(cctx, req)
	if err != nil {
		return fromStatus(err)
	}
	switch {
	case resp.GetGone():
		c.stopped.keep(pod.Namespace, pod.Name, nil)
	case len(resp.GetStatus()) > 0:
		st := &corev1.PodStatus{}
		if decode(c.encoding(), resp.GetStatus(), st) == nil {
			c.stopped.keep(pod.Namespace, pod.Name, st)
		}
	}
	return nil
}

// UpdatePodVolumes sends new volume files, if the provider keeps them current.
func (c *Client) UpdatePodVolumes(ctx context.Context, rp *provider.ResolvedPod) error {
	if !c.caps().GetVolumeUpdater() {
		return nil // as a provider that is no VolumeUpdater: nothing to do
	}
	return c.send(ctx, rp, c.api.UpdatePodVolumes)
}

// RunsEphemeralContainers answers for the provider at the other end, from the
// Capabilities it last announced: asked again whenever it comes back, perhaps as
// another version, and read by the pod controller at every sync, so a change
// takes effect without a restart of the agent. An ephemeral container's
// environment travels in PodRequest.env like any container's.
func (c *Client) RunsEphemeralContainers() bool { return c.caps().GetEphemeralContainers() }

// ResizesInPlace answers for the provider at the other end, from the
// Capabilities it last announced (as RunsEphemeralContainers).
func (c *Client) ResizesInPlace() bool { return c.caps().GetInPlaceResize() }

// GetPod asks the provider for one pod.
func (c *Client) GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	ctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := c.api.GetPod(ctx, &pb.PodRef{Namespace: namespace, Name: name})
	if err != nil {
		return nil, fromStatus(err)
	}
	pod := &corev1.Pod{}
	return pod, decode(c.encoding(), resp.GetPod(), pod)
}

// GetPodStatus asks the provider for one pod's status, unless StopPod answered
// it a moment ago (stopAnswers).
func (c *Client) GetPodStatus(ctx context.Context, namespace, name string) (*corev1.PodStatus, error) {
	if st, gone, ok := c.stopped.take(namespace, name); ok {
		if gone {
			return nil, errdefs.NotFound("pod %s/%s not found in the remote provider", namespace, name)
		}
		return st, nil
	}
	ctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := c.api.GetPodStatus(ctx, &pb.PodRef{Namespace: namespace, Name: name})
	if err != nil {
		return nil, fromStatus(err)
	}
	st := &corev1.PodStatus{}
	return st, decode(c.encoding(), resp.GetStatus(), st)
}

// GetPods asks the provider for every pod it runs.
func (c *Client) GetPods(ctx context.Context) ([]*corev1.Pod, error) {
	ctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := c.api.ListPods(ctx, &pb.ListPodsRequest{})
	if err != nil {
		return nil, fromStatus(err)
	}
	out := make([]*corev1.Pod, 0, len(resp.GetPods()))
	for _, data := range resp.GetPods() {
		pod := &corev1.Pod{}
		if err := decode(c.encoding(), data, pod); err != nil {
			return nil, err
		}
		out = append(out, pod)
	}
	return out, nil
}

// NotifyPods delivers the provider's pod changes until ctx ends: from its
// WatchPods stream, opened again whenever it breaks, or, for a provider that does
// not notify, from reading every pod each PollInterval (one call) and passing on
// those whose status changed. What the pod controller reads of a notified pod
// is its namespace, name, UID and status, so the stream asks for those alone
// (status_only): a provider that honours it sends them without the spec, one
// that does not sends whole pods, and notify is handed what came.
func (c *Client) NotifyPods(ctx context.Context, notify func(*corev1.Pod)) {
	go func() {
		for ctx.Err() == nil {
			var err error
			if c.caps().GetPodNotifier() {
				err = c.watchPods(ctx, notify)
			} else {
				err = c.pollPods(ctx, notify)
			}
			if ctx.Err() != nil {
				return
			}
			c.log.Warn("pod notifications interrupted; resuming once the provider answers", "error", err)
			c.awaitCaps(ctx)
		}
	}()
}

// capsBackoff paces awaitCaps: from 1s, doubling, up to 30s; each wait is up to
// 20% longer at random, so that the nodes of one provider that came back do not
// all ask it at once.
var capsBackoff = wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.2, Cap: 30 * time.Second, Steps: math.MaxInt32}

// awaitCaps asks for the provider's capabilities until it answers or ctx ends,
// with back-off (capsBackoff): after an interruption the provider may come back as
// another version, one that no longer notifies, say, and whether to watch or to
// poll is the new one's to say.
func (c *Client) awaitCaps(ctx context.Context) {
	_ = capsBackoff.DelayFunc().Until(ctx, false, true, func(ctx context.Context) (bool, error) {
		cctx, cancel := c.call(ctx)
		defer cancel()
		return c.refreshCaps(cctx) == nil, nil
	})
}

// watchPods delivers the pods of one WatchPods stream until it breaks.
func (c *Client) watchPods(ctx context.Context, notify func(*corev1.Pod)) error {
	ctx, end := context.WithCancel(ctx) // ends the stream on every return
	defer end()
	stream, err := c.api.WatchPods(ctx, &pb.WatchPodsRequest{StatusOnly: true})
	if err != nil {
		return fromStatus(err)
	}
	// The stream may have opened on a provider that restarted since its
	// capabilities were last asked, without any call failing in between: ask
	// them again now, over the connection the stream is on, so that what the
	// client says of the provider (encoding, RunsEphemeralContainers, …) is
	// that of the provider it watches. A later restart breaks the stream.
	cctx, cancel := c.call(ctx)
	err = c.refreshCaps(cctx)
	cancel()
	if err != nil {
		return err
	}
	for {
		m, err := stream.Recv()
		if err != nil {
			return fromStatus(err)
		}
		pod := &corev1.Pod{}
		if err := decode(c.encoding(), m.GetPod(), pod); err != nil {
			return err
		}
		notify(pod)
	}
}

// pollPods lists the pods at once and then every PollInterval, and delivers those
// whose status changed, until a listing fails (its error) or ctx ends.
func (c *Client) pollPods(ctx context.Context, notify func(*corev1.Pod)) error {
	last := map[string]string{}
	return wait.PollUntilContextCancel(ctx, c.cfg.PollInterval.Duration, true, func(ctx context.Context) (bool, error) {
		pods, err := c.GetPods(ctx)
		if err != nil {
			return false, err
		}
		for _, p := range pods {
			b, _ := json.Marshal(p.Status)
			key := providerutil.PodKey(p.Namespace, p.Name)
			if last[key] != string(b) {
				last[key] = string(b)
				notify(p)
			}
		}
		return false, nil
	})
}

// Ping checks the provider: its own Ping if it has one, else that it answers.
// A provider that is gone fails it, and the node goes NotReady.
func (c *Client) Ping(ctx context.Context) error {
	ctx, cancel := c.call(ctx)
	defer cancel()
	if !c.caps().GetNodeProvider() {
		return c.refreshCaps(ctx)
	}
	_, err := c.api.Ping(ctx, &pb.PingRequest{})
	return fromStatus(err)
}

// NotifyNodeStatus delivers the provider's node changes, if it reports any.
func (c *Client) NotifyNodeStatus(ctx context.Context, notify func(*corev1.Node)) {
	if !c.caps().GetNodeProvider() {
		return
	}
	// A stream that fails or ends is opened again a second later, up to 20%
	// more at random: the nodes of a provider that restarted do not all come
	// back at once.
	var mu sync.Mutex // one notification at a time, in order
	go wait.JitterUntilWithContext(ctx, func(ctx context.Context) {
		stream, err := c.api.WatchNodeStatus(ctx, &pb.WatchNodeStatusRequest{})
		if err != nil {
			return
		}
		for {
			m, err := stream.Recv()
			if err != nil {
				return
			}
			n := &corev1.Node{}
			if decode(c.encoding(), m.GetNode(), n) == nil {
				mu.Lock()
				notify(n)
				mu.Unlock()
			}
		}
	}, time.Second, 0.2, true)
}

// ConfigureNode lets the provider fill in the node (capacity, addresses, …).
func (c *Client) ConfigureNode(ctx context.Context, node *corev1.Node) {
	if !c.caps().GetNodeConfigurer() {
		return
	}
	data, err := encode(c.encoding(), node)
	if err != nil {
		return
	}
	ctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := c.api.ConfigureNode(ctx, &pb.NodeRequest{Node: data})
	if err != nil {
		c.log.Warn("the provider did not configure the node", "error", err)
		return
	}
	configured := &corev1.Node{}
	if err := decode(c.encoding(), resp.GetNode(), configured); err != nil {
		c.log.Warn("the provider's node", "error", err)
		return
	}
	*node = *configured
}

// GetStatsSummary asks the provider for the stats summary.
func (c *Client) GetStatsSummary(ctx context.Context) (*statsv1alpha1.Summary, error) {
	if !c.caps().GetStats() {
		return nil, errdefs.NotImplemented("the remote provider reports no stats")
	}
	ctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := c.api.GetStatsSummary(ctx, &pb.Empty{})
	if err != nil {
		return nil, fromStatus(err)
	}
	sum := &statsv1alpha1.Summary{}
	return sum, json.Unmarshal(resp.GetObject(), sum)
}

// GetMetricsResource asks the provider for its resource metrics.
func (c *Client) GetMetricsResource(ctx context.Context) ([]*dto.MetricFamily, error) {
	if !c.caps().GetMetrics() {
		return nil, errdefs.NotImplemented("the remote provider reports no resource metrics")
	}
	ctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := c.api.GetMetricsResource(ctx, &pb.Empty{})
	if err != nil {
		return nil, fromStatus(err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(string(resp.GetData())))
	if err != nil {
		return nil, err
	}
	out := make([]*dto.MetricFamily, 0, len(fams))
	for _, name := range slices.Sorted(maps.Keys(fams)) {
		out = append(out, fams[name])
	}
	return out, nil
}
