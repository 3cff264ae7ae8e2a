package identity

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	certificatesinformers "k8s.io/client-go/informers/certificates/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	certificateslisters "k8s.io/client-go/listers/certificates/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/vkubelet/vkubelet/internal/informerutil"
)

// ApproverConfig is what an Approver needs.
type ApproverConfig struct {
	// Client approves and denies CSRs; it needs get/list/watch on
	// certificatesigningrequests, update on their approval, approve on the two
	// node signers, and create on Events.
	Client kubernetes.Interface
	Policy Policy
	// PodNamespace and PodSelector, when the selector is set, add the addresses
	// of those pods (the install's own node processes) to Policy.ServingIPs:
	// a node's serving certificate may then name the address it really runs at,
	// which no holder of the install's credentials can change. Needs list/watch
	// on pods in PodNamespace.
	PodNamespace string
	PodSelector  labels.Selector
	Logger       *slog.Logger
}

// Approver approves the install's node CSRs as its Policy says. Its loop is
// client-go's: an informer of CSRs feeds a rate-limited queue of names; a worker
// decides on the CSR as it is now, never as the event that woke it said.
type Approver struct {
	client kubernetes.Interface
	policy Policy
	log    *slog.Logger
	// csrs lists the cluster's CSRs; csrsSynced says the first list is in.
	csrs       certificateslisters.CertificateSigningRequestLister
	csrsSynced cache.InformerSynced
	// podsSynced is nil without Config.PodSelector.
	podsSynced cache.InformerSynced
	informers  informerutil.Informers
	queue      workqueue.TypedRateLimitingInterface[string]
	recorder   record.EventRecorder
	events     record.EventBroadcaster
}

// NewApprover returns an approver; Run starts it.
func NewApprover(cfg ApproverConfig) (*Approver, error) {
	if cfg.Client == nil {
		return nil, errors.New("csr approver: a client is required")
	}
	if err := cfg.Policy.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	byNamespace := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
	csrInformer := certificatesinformers.NewCertificateSigningRequestInformer(cfg.Client, 0, byNamespace)
	c := &Approver{
		client: cfg.Client, policy: cfg.Policy, log: cfg.Logger,
		csrs:       certificateslisters.NewCertificateSigningRequestLister(csrInformer.GetIndexer()),
		csrsSynced: csrInformer.HasSynced,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](200*time.Millisecond, time.Minute),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "csr-approver"}),
		events: record.NewBroadcaster(),
	}
	c.recorder = c.events.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "vkubelet-csr-approver"})
	if cfg.PodSelector != nil && !cfg.PodSelector.Empty() {
		pods := coreinformers.NewFilteredPodInformer(cfg.Client, cfg.PodNamespace, 0, byNamespace,
			func(o *metav1.ListOptions) { o.LabelSelector = cfg.PodSelector.String() })
		c.podsSynced = pods.HasSynced
		c.policy.ServingIPs = AnyOf{c.policy.ServingIPs, podIPs{corelisters.NewPodLister(pods.GetIndexer()).Pods(cfg.PodNamespace)}}
		c.informers.Add(pods)
	}
	c.informers.Add(csrInformer)
	_, err := csrInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: func(_, obj any) { c.enqueue(obj) },
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Approver) enqueue(obj any) {
	csr, ok := obj.(*certificatesv1.CertificateSigningRequest)
	if !ok || Decided(csr) {
		return
	}
	c.queue.Add(csr.Name)
}

// Run decides on CSRs until ctx ends.
func (c *Approver) Run(ctx context.Context, workers int) error {
	defer c.queue.ShutDown()
	c.events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.client.CoreV1().Events("")})
	defer c.events.Shutdown()
	c.informers.Start(ctx.Done())
	defer c.informers.Shutdown()
	synced := []cache.InformerSynced{c.csrsSynced}
	if c.podsSynced != nil {
		synced = append(synced, c.podsSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return fmt.Errorf("csr approver: caches not synced: %w", ctx.Err())
	}
	c.log.Info("approving the CSRs of this install's nodes", "names", c.policy.Names, "prefixes", c.policy.Prefixes,
		"requesters", c.policy.Requesters, "requesterGroups", c.policy.RequesterGroups)
	for range max(workers, 1) {
		go c.runWorker(ctx)
	}
	<-ctx.Done()
	return nil
}

func (c *Approver) runWorker(ctx context.Context) {
	for c.processNextWorkItem(ctx) {
	}
}

func (c *Approver) processNextWorkItem(ctx context.Context) bool {
	name, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(name)
	if err := c.syncHandler(ctx, name); err != nil {
		c.log.Debug("deciding on a CSR; will retry", "csr", name, "error", err)
		c.queue.AddRateLimited(name)
		return true
	}
	c.queue.Forget(name)
	return true
}

// syncHandler decides on the CSR name as the cache holds it now.
func (c *Approver) syncHandler(ctx context.Context, name string) error {
	csr, err := c.csrs.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	d := c.policy.Decide(csr, ByApprover)
	if d.Verdict == Ignore {
		return nil
	}
	csr = csr.DeepCopy()
	cond := certificatesv1.CertificateSigningRequestCondition{
		Status: corev1.ConditionTrue, Message: d.Reason, LastUpdateTime: metav1.Now(),
	}
	if d.Verdict == Approve {
		cond.Type, cond.Reason = certificatesv1.CertificateApproved, "VkubeletApproved"
	} else {
		cond.Type, cond.Reason = certificatesv1.CertificateDenied, "VkubeletDenied"
	}
	csr.Status.Conditions = append(csr.Status.Conditions, cond)
	if _, err := c.client.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("%s CSR %s: %w", d.Verdict, csr.Name, err)
	}
	if d.Verdict == Approve {
		c.log.Info("approved a node's CSR", "csr", csr.Name, "signer", csr.Spec.SignerName, "requester", csr.Spec.Username, "reason", d.Reason)
		c.recorder.Event(csr, corev1.EventTypeNormal, "Approved", d.Reason)
	} else {
		c.log.Warn("denied a CSR", "csr", csr.Name, "signer", csr.Spec.SignerName, "requester", csr.Spec.Username, "reason", d.Reason)
		c.recorder.Event(csr, corev1.EventTypeWarning, "Denied", d.Reason)
	}
	return nil
}

// podIPs is the IPSet of the addresses of the install's own pods: those its
// lister holds, which the informer's selector chose.
type podIPs struct {
	lister corelisters.PodNamespaceLister
}

func (s podIPs) Contains(_ string, ip net.IP) bool {
	pods, err := s.lister.List(labels.Everything())
	if err != nil {
		return false
	}
	for _, p := range pods {
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning && p.Status.Phase != corev1.PodPending {
			continue
		}
		for _, a := range p.Status.PodIPs {
			if got := net.ParseIP(a.IP); got != nil && got.Equal(ip) {
				return true
			}
		}
	}
	return false
}
