package upstream

import (
	"bytes"
	"context"
	"io"
	"strings"
	"sync"
	"sync/atomic"

	dto "github.com/prometheus/client_model/go"
	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	corev1 "k8s.io/api/core/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/vkubelet/vkubelet/provider"
)

// fakeProvider is an upstream provider (nodeutil.Provider) that records what it is
// given and answers what a test sets.
type fakeProvider struct {
	mu      sync.Mutex
	pods    map[string]*corev1.Pod
	created []*corev1.Pod
	logOpts api.ContainerLogOpts

	err      error                                     // returned by every pod call
	nilPods  bool                                      // GetPod and GetPodStatus answer nil, nil
	readErr  error                                     // returned by GetPod and GetPodStatus
	onCreate func(*corev1.Pod)                         // runs in CreatePod
	exec     func(cmd []string, io api.AttachIO) error // RunInContainer and AttachToContainer

	inside, most atomic.Int32 // calls under way, and the most at once
}

func newFake() *fakeProvider { return &fakeProvider{pods: map[string]*corev1.Pod{}} }

// fakeWith is a fakeProvider that has pods already.
func fakeWith(pods ...*corev1.Pod) *fakeProvider {
	f := newFake()
	for _, p := range pods {
		f.pods[p.Namespace+"/"+p.Name] = p
	}
	return f
}

func (f *fakeProvider) enter() func() {
	n := f.inside.Add(1)
	for {
		m := f.most.Load()
		if n <= m || f.most.CompareAndSwap(m, n) {
			break
		}
	}
	return func() { f.inside.Add(-1) }
}

func (f *fakeProvider) CreatePod(_ context.Context, pod *corev1.Pod) error {
	defer f.enter()()
	if f.onCreate != nil {
		f.onCreate(pod)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	f.created = append(f.created, pod)
	f.pods[pod.Namespace+"/"+pod.Name] = pod
	return nil
}

func (f *fakeProvider) UpdatePod(ctx context.Context, pod *corev1.Pod) error {
	return f.CreatePod(ctx, pod)
}

func (f *fakeProvider) DeletePod(_ context.Context, pod *corev1.Pod) error {
	defer f.enter()()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	delete(f.pods, pod.Namespace+"/"+pod.Name)
	return nil
}

func (f *fakeProvider) GetPod(_ context.Context, namespace, name string) (*corev1.Pod, error) {
	defer f.enter()()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil || f.nilPods {
		return nil, f.err
	}
	if f.readErr != nil {
		return nil, f.readErr
	}
	return f.pods[namespace+"/"+name], nil // not a copy, as upstream's mock
}

func (f *fakeProvider) GetPodStatus(ctx context.Context, namespace, name string) (*corev1.PodStatus, error) {
	p, err := f.GetPod(ctx, namespace, name)
	if p == nil {
		return nil, err
	}
	return &p.Status, err
}

func (f *fakeProvider) GetPods(context.Context) ([]*corev1.Pod, error) {
	defer f.enter()()
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*corev1.Pod
	for _, p := range f.pods {
		out = append(out, p)
	}
	return out, f.err
}

func (f *fakeProvider) GetContainerLogs(_ context.Context, _, _, _ string, opts api.ContainerLogOpts) (io.ReadCloser, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.logOpts = opts
	if f.err != nil {
		return nil, f.err
	}
	return io.NopCloser(strings.NewReader("a line\n")), nil
}

func (f *fakeProvider) RunInContainer(_ context.Context, _, _, _ string, cmd []string, attach api.AttachIO) error {
	return f.exec(cmd, attach)
}

func (f *fakeProvider) AttachToContainer(_ context.Context, _, _, _ string, attach api.AttachIO) error {
	return f.exec(nil, attach)
}

func (f *fakeProvider) GetStatsSummary(context.Context) (*statsv1alpha1.Summary, error) {
	defer f.enter()()
	return &statsv1alpha1.Summary{Node: statsv1alpha1.NodeStats{NodeName: "fake"}}, nil
}

func (f *fakeProvider) GetMetricsResource(context.Context) ([]*dto.MetricFamily, error) {
	return nil, nil
}

func (f *fakeProvider) PortForward(_ context.Context, _, _ string, _ int32, stream io.ReadWriteCloser) error {
	_, err := io.Copy(stream, stream)
	return err
}

// notifyingFake is a fakeProvider that is also a node.PodNotifier.
type notifyingFake struct {
	*fakeProvider
	notify func(*corev1.Pod)
}

func (f *notifyingFake) NotifyPods(_ context.Context, cb func(*corev1.Pod)) { f.notify = cb }

// fakeNode is an upstream node.NodeProvider.
type fakeNode struct {
	pingErr error
	notify  func(*corev1.Node)
}

func (n *fakeNode) Ping(context.Context) error                                { return n.pingErr }
func (n *fakeNode) NotifyNodeStatus(_ context.Context, cb func(*corev1.Node)) { n.notify = cb }

// testIO is vkubelet's AttachIO over buffers.
type testIO struct {
	stdin          io.Reader
	stdout, stderr *closeBuffer
	tty            bool
	resize         chan provider.TermSize
}

func (t *testIO) Stdin() io.Reader { return t.stdin }
func (t *testIO) Stdout() io.WriteCloser {
	if t.stdout == nil {
		return nil
	}
	return t.stdout
}
func (t *testIO) Stderr() io.WriteCloser {
	if t.stderr == nil {
		return nil
	}
	return t.stderr
}
func (t *testIO) TTY() bool                        { return t.tty }
func (t *testIO) Resize() <-chan provider.TermSize { return t.resize }

// closeBuffer is a bytes.Buffer that can be closed, safe for concurrent use.
type closeBuffer struct {
	mu     sync.Mutex
	b      bytes.Buffer
	closed bool
}

func (c *closeBuffer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.b.Write(p)
}

func (c *closeBuffer) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	return nil
}

func (c *closeBuffer) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.b.String()
}
