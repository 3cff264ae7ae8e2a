package provider

import (
	"context"
	"io"
	"strconv"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// PodLifecycleHandler is the one interface every provider implements.
//
// Shared rules for all methods:
//   - Pods passed in are copies made for the call: the caller keeps no reference, so
//     a provider may keep them, and change them, without copying.
//   - Pods and statuses returned are owned by the caller from then on: return copies,
//     never objects the provider will go on mutating.
//   - Errors should be classified with errdefs (NotFound, InvalidInput, Unavailable);
//     an unclassified error is treated as transient and retried with back-off.
//   - Methods may be called concurrently, for different pods and for the same pod.
type PodLifecycleHandler interface {
	// CreatePod starts the pod. It returns once the provider has accepted the pod; the
	// pod need not be running yet (its progress is reported through GetPodStatus or
	// PodNotifier). Creating a pod the provider already has (same namespace/name and
	// UID) must succeed without starting it twice: the controller may retry after a
	// crash or a lost answer.
	CreatePod(ctx context.Context, pod *corev1.Pod) error

	// UpdatePod is called when a mutable field of a running pod changed (container
	// images, activeDeadlineSeconds, tolerations, labels and annotations; new
	// ephemeral containers for an EphemeralContainerRunner; containers' resources
	// for an InPlaceResizer). A provider that cannot apply a change may return an
	// errdefs.InvalidInput error.
	UpdatePod(ctx context.Context, pod *corev1.Pod) error

	// DeletePod asks the provider to stop the pod, honouring
	// pod.DeletionGracePeriodSeconds (nil means the pod's
	// spec.terminationGracePeriodSeconds). It may return before the pod has stopped;
	// the controller then waits for GetPodStatus (or NotifyPods) to report the
	// containers terminated, or for GetPod to return NotFound, before it removes the
	// pod from the API. Deleting a pod the provider does not have returns an
	// errdefs.NotFound error, which the controller treats as success.
	DeletePod(ctx context.Context, pod *corev1.Pod) error

	// GetPod returns the pod as the provider knows it, with its current status, or an
	// errdefs.NotFound error.
	GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error)

	// GetPodStatus returns the current status of the pod, or an errdefs.NotFound error.
	// It may be served from a cache and is called often: it must be cheap.
	GetPodStatus(ctx context.Context, namespace, name string) (*corev1.PodStatus, error)

	// GetPods returns every pod the provider runs for this node, including pods the
	// API server no longer knows (the controller deletes those after a restart).
	GetPods(ctx context.Context) ([]*corev1.Pod, error)
}

// EphemeralContainerRunner is implemented by providers that run ephemeral containers
// (`kubectl debug`, added to a running pod through the API's ephemeralcontainers
// subresource). For such a provider UpdatePod (UpdateResolvedPod) is also called when
// spec.ephemeralContainers gains an entry; the provider starts each new one in the
// running pod as the kubelet does (in the pod's network and IPC namespaces, and in
// the process namespace of its targetContainerName if it names one), never restarts
// it nor probes it, and reports it in status.ephemeralContainerStatuses. A resolving
// provider finds the new container's environment in ResolvedPod.Env.
//
// Other providers never hear of ephemeral containers: the pod controller reports each
// one Waiting, with a reason saying the node cannot run it.
type EphemeralContainerRunner interface {
	// RunsEphemeralContainers reports whether the provider runs them: a provider
	// standing for another one answers for it.
	RunsEphemeralContainers() bool
}

// RunsEphemeralContainers reports whether p runs ephemeral containers: it is an
// EphemeralContainerRunner and says so (implementing the interface is not
// enough, as a provider standing for another one answers for it).
func RunsEphemeralContainers(p any) bool {
	r, ok := p.(EphemeralContainerRunner)
	return ok && r.RunsEphemeralContainers()
}

// InPlaceResizer is implemented by providers that resize running pods in place
// (a client changes spec.containers[].resources through the pod's resize
// subresource). For such a provider the node reports each container's resources
// in its status, as a kubelet does, which is what lets the API server accept a
// resize of a running pod at all, and hands a resize to UpdatePod
// (UpdateResolvedPod). UpdatePod returns once the provider runs the containers
// with the new resources; an errdefs.InvalidInput or NotImplemented error says
// it cannot, and the pod then shows the condition PodResizePending, reason
// Infeasible, with the error's words, and goes on with the resources it has.
//
// For other providers the API server refuses resizes of running pods ("Pod
// running on node without support for resize"), as it does for a kubelet that
// does not resize.
type InPlaceResizer interface {
	// ResizesInPlace reports whether the provider resizes running pods: a
	// provider standing for another one answers for it.
	ResizesInPlace() bool
}

// ResizesInPlace reports whether p resizes running pods: it is an
// InPlaceResizer and says so.
func ResizesInPlace(p any) bool {
	r, ok := p.(InPlaceResizer)
	return ok && r.ResizesInPlace()
}

// FeatureDeclarer is implemented by providers that support features a node
// declares in status.declaredFeatures (Kubernetes' NodeDeclaredFeatures): the
// API server refuses a pod update that needs a feature its node has not
// declared ("pod update requires features ..."), and the scheduler keeps pods
// that need one off nodes that lack it. The node controller writes the names
// the provider gives, sorted and without duplicates, as a kubelet declares its
// own. A provider that is no FeatureDeclarer declares nothing, and the node
// leaves status.declaredFeatures as it finds it.
type FeatureDeclarer interface {
	// DeclaredFeatures names the features the provider supports, by the names
	// of k8s.io/component-helpers/nodedeclaredfeatures (its features package
	// exports them, e.g. restartallcontainers.RestartAllContainersOnContainerExits).
	// It is read once, when the node is registered; a provider standing for
	// another one answers for it.
	DeclaredFeatures() []string
}

// DeclaredFeatures returns the features p declares (FeatureDeclarer), and
// whether it is a FeatureDeclarer at all.
func DeclaredFeatures(p any) ([]string, bool) {
	d, ok := p.(FeatureDeclarer)
	if !ok {
		return nil, false
	}
	return d.DeclaredFeatures(), true
}

// PodNotifier is implemented by providers that push status changes instead of being
// polled.
type PodNotifier interface {
	// NotifyPods is called once, before any other call of the pod controller, with a
	// callback that the provider calls whenever a pod's status changes, with the pod
	// (status included). The callback does not block: it only queues work. The provider
	// must not call it while holding a lock the other methods need.
	NotifyPods(ctx context.Context, notify func(*corev1.Pod))
}

// PodEvent is an Event a provider has to tell about one of its pods, as the
// kubelet records them: a probe's warning, a sandbox that could not be made.
type PodEvent struct {
	// Pod is the pod it concerns; its namespace, name and UID are read.
	Pod *corev1.Pod
	// Container is the name of the container it concerns, "" for the pod.
	Container string
	// Type is corev1.EventTypeNormal or corev1.EventTypeWarning.
	Type string
	// Reason is one CamelCase word machines match on (the kubelet's, where
	// the kubelet has one: ProbeWarning, FailedCreatePodSandBox, …).
	Reason string
	// Message is for people.
	Message string
}

// PodEventRecorder is implemented by providers with Events of their own to
// record on their pods; the node records them (as the pod's Events, or a
// container's) with its own recorder, which aggregates repeats.
type PodEventRecorder interface {
	// RecordPodEvents is called once, before any other call of the pod
	// controller, with the function that records one. It does not block.
	RecordPodEvents(record func(PodEvent))
}

// PodAdmitter is implemented by providers that refuse some pods outright, as
// the kubelet's admission handlers do: a pod the provider will never run (an
// unsafe sysctl, say) fails at once, phase Failed with the reason given,
// instead of waiting Pending while CreatePod is retried.
type PodAdmitter interface {
	// AdmitPod is called before CreatePod for a pod the provider does not
	// run. It reports ok, or why the pod may never run here: reason is one
	// CamelCase word (the kubelet's, where it has one: SysctlForbidden), the
	// message is for people. It must not block.
	AdmitPod(pod *corev1.Pod) (reason, message string, ok bool)
}

// NodeProvider lets a provider report on the health and resources of the node.
// Providers without it get a node that is always Ready with the capacity given by
// NodeConfigurer (or none).
type NodeProvider interface {
	// Ping checks the back end is reachable and healthy. It is called before every
	// lease renewal; while it fails, renewals stop and the cluster marks the node
	// NotReady. It must return within the context's deadline.
	Ping(ctx context.Context) error

	// NotifyNodeStatus is called once with a callback the provider calls with a node
	// whose status (capacity, allocatable, conditions, addresses) changed. The node
	// controller writes the new status at once. The callback does not block.
	NotifyNodeStatus(ctx context.Context, notify func(*corev1.Node))
}

// NodeConfigurer fills in the node object before it is registered: capacity,
// allocatable (extended resources included), conditions, addresses, nodeInfo,
// providerID and topology labels. It changes only what it knows about; the node
// controller has already set vkubelet's defaults.
type NodeConfigurer interface {
	ConfigureNode(ctx context.Context, node *corev1.Node)
}

// StatsProvider serves the kubelet's /stats/summary.
type StatsProvider interface {
	GetStatsSummary(ctx context.Context) (*statsv1alpha1.Summary, error)
}

// ResourceMetricsProvider serves the kubelet's /metrics/resource: CPU and memory of
// the node, pods and containers in the metric families metrics-server reads
// (node_cpu_usage_seconds_total, container_memory_working_set_bytes, …).
type ResourceMetricsProvider interface {
	GetMetricsResource(ctx context.Context) ([]*dto.MetricFamily, error)
}

// ContainerLogOpts are the options of the kubelet's /containerLogs endpoint, already
// parsed and validated. Zero values mean "not set".
type ContainerLogOpts struct {
	Tail         int        // lines from the end; 0 with TailSet means none
	TailSet      bool       // whether Tail was given
	LimitBytes   int64      // stop after this many bytes
	Timestamps   bool       // prefix every line with its RFC3339Nano timestamp
	Follow       bool       // keep streaming until the context ends
	Previous     bool       // the previous, terminated instance of the container
	SinceSeconds int64      // only lines newer than this many seconds
	SinceTime    *time.Time // only lines newer than this time
}

// ContainerLogsProvider serves container logs. The returned reader is closed by the
// caller; with Follow it must end when ctx is cancelled.
type ContainerLogsProvider interface {
	GetContainerLogs(ctx context.Context, namespace, pod, container string, opts ContainerLogOpts) (io.ReadCloser, error)
}

// TermSize is a terminal size, in characters.
type TermSize struct {
	Width  uint16
	Height uint16
}

// AttachIO carries the streams of an exec or attach session. Stdin, Stdout and Stderr
// are nil when the caller did not ask for them. With TTY, Stderr is nil (a terminal
// merges both) and Resize delivers terminal size changes until the session ends.
type AttachIO interface {
	Stdin() io.Reader
	Stdout() io.WriteCloser
	Stderr() io.WriteCloser
	TTY() bool
	Resize() <-chan TermSize
}

// ExecError is returned by RunInContainer when the command ran and exited non-zero,
// so the caller can report the exit code the way kubectl expects.
type ExecError struct {
	ExitCode int
}

func (e *ExecError) Error() string {
	return "command terminated with non-zero exit code " + strconv.Itoa(e.ExitCode)
}

// ContainerExecProvider runs a command in a container (kubectl exec).
type ContainerExecProvider interface {
	// RunInContainer runs cmd and returns when it exits (nil for exit code 0, an
	// *ExecError otherwise) or when ctx ends.
	RunInContainer(ctx context.Context, namespace, pod, container string, cmd []string, attach AttachIO) error
}

// ContainerAttachProvider attaches to a running container's main process (kubectl attach).
type ContainerAttachProvider interface {
	AttachToContainer(ctx context.Context, namespace, pod, container string, attach AttachIO) error
}

// PortForwardProvider connects a stream to a port inside the pod (kubectl port-forward).
type PortForwardProvider interface {
	// PortForward copies bytes both ways between stream and the pod's port until either
	// side closes or ctx ends. It does not close stream; the caller does.
	PortForward(ctx context.Context, namespace, pod string, port int32, stream io.ReadWriteCloser) error
}
