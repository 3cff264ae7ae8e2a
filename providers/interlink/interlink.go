// Package interlink is `--provider interlink`: a virtual node whose pods run
// through an interLink plugin (a "sidecar": Slurm, HTCondor, Docker, Kubernetes,
// …), talked to over the plugin's REST API as interLink's own API server talks to
// it, so that the plugins that exist today work behind vkubelet unchanged.
//
//	POST /create   [{pod, container: [{name, configMaps, secrets, projectedvolumemaps, emptyDirs}]}]  →  [{PodUID, PodJID}]
//	POST /delete   pod                                                                              →  anything 2xx
//	GET  /status   [pod, …] (in the body)                                                           →  [{name, UID, namespace, JID, containers, initContainers}]
//	GET  /status   []  (the ping)                                                                   →  2xx
//	GET  /getLogs  {Namespace, PodUID, PodName, ContainerName, Opts: {Tail, Bytes, Timestamps, Follow, Previous, SinceSeconds, SinceTime}}  →  text
//
// Volume files come from vkubelet's resolution: each container gets the
// ConfigMaps and Secrets its mounts use, with the resolved data, and the files
// of its projected volumes (service-account token, CA, namespace) as one
// ConfigMap per volume. The plugin has no list: the pods and their job IDs are
// kept in a state file, so that a restarted node finds its jobs again instead of
// submitting them twice; a pod the state file lacks (lost with the node's pod
// in an upgrade) is asked about (/status) before it is submitted or taken as
// stopped. Statuses are polled for all pods in one call.
package interlink

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/vkubelet/vkubelet/errdefs"
	"github.com/vkubelet/vkubelet/provider"
	"github.com/vkubelet/vkubelet/providers/providerutil"
)

// Config is the provider's JSON configuration.
type Config struct {
	// URL of the plugin: http(s)://host:port, or unix:///path/to.sock.
	URL string `json:"url"`
	// TokenFile holds a bearer token sent with every request; empty: none.
	TokenFile string `json:"tokenFile,omitempty"`
	// StateFile keeps the pods and their job IDs across restarts. Required.
	StateFile string `json:"stateFile"`
	// PollInterval is how often every pod's status is asked for. Default 5s.
	PollInterval providerutil.Duration `json:"pollInterval,omitzero"`
	// Timeout bounds each request but logs that follow. Default 30s.
	Timeout providerutil.Duration `json:"timeout,omitzero"`
	// Capacity is the node's (the plugin does not say): cpu, memory, pods.
	Capacity map[string]string `json:"capacity,omitempty"`
}

// LoadConfig reads a Config from a JSON file, strictly.
func LoadConfig(path string) (Config, error) {
	var cfg Config
	if path == "" {
		return cfg, errors.New("interlink provider: --provider-config must name the plugin's url and a stateFile")
	}
	if err := providerutil.DecodeJSONFile(path, &cfg); err != nil {
		return cfg, fmt.Errorf("interlink provider config: %w", err)
	}
	if cfg.URL == "" || cfg.StateFile == "" {
		return cfg, fmt.Errorf("interlink provider config %s: url and stateFile are required", path)
	}
	if cfg.PollInterval.Duration <= 0 {
		cfg.PollInterval.Duration = 5 * time.Second
	}
	if cfg.Timeout.Duration <= 0 {
		cfg.Timeout.Duration = 30 * time.Second
	}
	for k, v := range cfg.Capacity {
		if _, err := resource.ParseQuantity(v); err != nil {
			return cfg, fmt.Errorf("interlink provider config %s: capacity %s: %w", path, k, err)
		}
	}
	return cfg, nil
}

// Provider runs pods through an interLink plugin.
type Provider struct {
	cfg  Config
	node string
	base string // URL prefix of requests
	http *http.Client
	log  *slog.Logger

	mu   sync.Mutex
	pods map[string]*record // by namespace/name
}

// record is a pod the plugin runs, as kept in the state file.
type record struct {
	Pod    *corev1.Pod       `json:"pod"`
	JID    string            `json:"jid"`
	Status *corev1.PodStatus `json:"status,omitempty"`
}

// New reads the state file and returns the provider.
func New(cfg Config, nodeName string, log *slog.Logger) (*Provider, error) {
	if log == nil {
		log = slog.Default()
	}
	p := &Provider{cfg: cfg, node: nodeName, log: log.With("provider", "interlink"), pods: map[string]*record{},
		http: &http.Client{}, base: strings.TrimSuffix(cfg.URL, "/")}
	if path, ok := strings.CutPrefix(cfg.URL, "unix://"); ok {
		p.base = "http://interlink-plugin"
		p.http.Transport = &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		}}
	}
	b, err := os.ReadFile(cfg.StateFile)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, err
	default:
		if err := json.Unmarshal(b, &p.pods); err != nil {
			return nil, fmt.Errorf("interlink provider: state file %s: %w", cfg.StateFile, err)
		}
		p.log.Info("loaded the pods' job IDs", "file", cfg.StateFile, "pods", len(p.pods))
	}
	return p, nil
}

// saveLocked writes the state file; p.mu is held.
func (p *Provider) saveLocked() error {
	b, err := json.Marshal(p.pods)
	if err != nil {
		return err
	}
	tmp := p.cfg.StateFile + ".tmp"
	if err := os.MkdirAll(filepath.Dir(tmp), 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, p.cfg.StateFile)
}

// do sends a request with a JSON body and decodes a JSON answer into out (nil:
// any 2xx will do).
func (p *Provider) do(ctx context.Context, method, path string, body, out any) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout.Duration)
	defer cancel()
	resp, err := p.request(ctx, method, path, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("interlink plugin %s %s: decoding the answer: %w", method, path, err)
	}
	return nil
}

func (p *Provider) request(ctx context.Context, method, path string, body any) (*http.Response, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, method, p.base+path, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	providerutil.InjectTraceHeaders(ctx, req.Header)
	if p.cfg.TokenFile != "" {
		tok, err := os.ReadFile(p.cfg.TokenFile) // read each time: tokens are rotated
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	}
	resp, err := p.http.Do(req)
	if err != nil {
		return nil, errdefs.Unavailable("interlink plugin %s %s: %v", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		err := fmt.Errorf("interlink plugin %s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(msg)))
		switch resp.StatusCode {
		case http.StatusNotFound:
			return nil, errdefs.AsNotFound(err)
		case http.StatusBadRequest, http.StatusUnprocessableEntity:
			return nil, errdefs.AsInvalidInput(err)
		}
		return nil, err
	}
	return resp, nil
}

// CreateResolvedPod submits the pod with its containers' volume data.
func (p *Provider) CreateResolvedPod(ctx context.Context, rp *provider.ResolvedPod) error {
	k := providerutil.PodKey(rp.Pod.Namespace, rp.Pod.Name)
	p.mu.Lock()
	rec := p.pods[k]
	p.mu.Unlock()
	if rec != nil && rec.Pod.UID == rp.Pod.UID {
		return nil // submitted already (before a restart, say)
	}
	// Not in the state file, which a replaced node's pod may have lost with
	// its emptyDir (a helm upgrade): a plugin that still runs the pod answers
	// for it, and the pod is taken back rather than submitted twice.
	if known, err := p.pluginStatus(ctx, rp.Pod); err == nil && known != nil {
		return p.adopt(rp.Pod, *known)
	}
	var created []createdJob
	if err := p.do(ctx, http.MethodPost, "/create", []podData{retrievedPod(rp)}, &created); err != nil {
		return err
	}
	jid := ""
	for _, c := range created {
		if c.PodUID == string(rp.Pod.UID) {
			jid = c.PodJID
		}
	}
	pod := rp.Pod.DeepCopy()
	pending := &corev1.PodStatus{Phase: corev1.PodPending, Reason: "Submitted", Message: "job " + jid}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pods[k] = &record{Pod: pod, JID: jid, Status: pending}
	return p.saveLocked()
}

// pluginStatus asks the plugin for the status of pod, which the state file does not
// have: nil if the plugin does not answer for it (it does not run it).
func (p *Provider) pluginStatus(ctx context.Context, pod *corev1.Pod) (*podStatus, error) {
	var statuses []podStatus
	if err := p.do(ctx, http.MethodGet, "/status", []*corev1.Pod{pod}, &statuses); err != nil {
		return nil, err
	}
	for _, st := range statuses {
		if st.UID == string(pod.UID) {
			return &st, nil
		}
	}
	return nil, nil
}

// adopt records pod, which the plugin runs with status st, as if this node had
// submitted it.
func (p *Provider) adopt(pod *corev1.Pod, st podStatus) error {
	status, err := podPhase(pod, st, nil)
	if err != nil {
		// An answer that does not fit the pod: the next poll asks again.
		status = &corev1.PodStatus{Phase: corev1.PodPending, Reason: "Submitted", Message: "job " + st.JID}
	}
	p.log.Info("the plugin runs a pod the state file does not have: taken back, not submitted again",
		"pod", providerutil.PodKey(pod.Namespace, pod.Name), "jid", st.JID)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pods[providerutil.PodKey(pod.Namespace, pod.Name)] = &record{Pod: pod.DeepCopy(), JID: st.JID, Status: status}
	return p.saveLocked()
}

// CreatePod submits a pod without resolved data (not called by the controller).
func (p *Provider) CreatePod(ctx context.Context, pod *corev1.Pod) error {
	return p.CreateResolvedPod(ctx, &provider.ResolvedPod{Pod: pod})
}

// UpdatePod: interLink plugins cannot change a submitted job; a resize is
// refused, so that the pod shows it pending, not made.
func (p *Provider) UpdatePod(_ context.Context, pod *corev1.Pod) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if rec := p.pods[providerutil.PodKey(pod.Namespace, pod.Name)]; rec != nil && rec.Pod.UID == pod.UID {
		return providerutil.RefuseResize("interlink", rec.Pod, pod)
	}
	return nil
}

// UpdateResolvedPod: as UpdatePod.
func (p *Provider) UpdateResolvedPod(ctx context.Context, rp *provider.ResolvedPod) error {
	return p.UpdatePod(ctx, rp.Pod)
}

// DeletePod asks the plugin to delete the job and forgets the pod.
func (p *Provider) DeletePod(ctx context.Context, pod *corev1.Pod) error {
	k := providerutil.PodKey(pod.Namespace, pod.Name)
	p.mu.Lock()
	rec := p.pods[k]
	p.mu.Unlock()
	if rec == nil {
		// Not in the state file: stopped already, or submitted by a node whose
		// state file is lost. The plugin says which; while it cannot, the pod
		// is not taken as stopped.
		known, err := p.pluginStatus(ctx, pod)
		if err != nil {
			return err
		}
		if known == nil {
			return providerutil.PodNotFound("interlink", pod.Namespace, pod.Name)
		}
		rec = &record{Pod: pod.DeepCopy(), JID: known.JID}
	}
	if err := p.do(ctx, http.MethodPost, "/delete", rec.Pod, nil); err != nil && !errdefs.IsNotFound(err) {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.pods, k)
	return p.saveLocked()
}

// GetPod returns the pod with its last status.
func (p *Provider) GetPod(_ context.Context, namespace, name string) (*corev1.Pod, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	rec := p.pods[providerutil.PodKey(namespace, name)]
	if rec == nil {
		return nil, providerutil.PodNotFound("interlink", namespace, name)
	}
	pod := rec.Pod.DeepCopy()
	if rec.Status != nil {
		pod.Status = *rec.Status.DeepCopy()
	}
	return pod, nil
}

// GetPodStatus returns the pod's last polled status.
func (p *Provider) GetPodStatus(ctx context.Context, namespace, name string) (*corev1.PodStatus, error) {
	pod, err := p.GetPod(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	return &pod.Status, nil
}

// GetPods returns every pod submitted and not deleted.
func (p *Provider) GetPods(context.Context) ([]*corev1.Pod, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*corev1.Pod, 0, len(p.pods))
	for _, rec := range p.pods {
		pod := rec.Pod.DeepCopy()
		if rec.Status != nil {
			pod.Status = *rec.Status.DeepCopy()
		}
		out = append(out, pod)
	}
	return out, nil
}

// NotifyPods polls every pod's status in one /status call each PollInterval and
// passes on those that changed.
func (p *Provider) NotifyPods(ctx context.Context, notify func(*corev1.Pod)) {
	providerutil.PollEvery(ctx, p.cfg.PollInterval.Duration, p.log, "polling the plugin for statuses",
		func(ctx context.Context) error { return p.poll(ctx, notify) })
}

func (p *Provider) poll(ctx context.Context, notify func(*corev1.Pod)) error {
	pods, _ := p.GetPods(ctx)
	if len(pods) == 0 {
		return nil
	}
	var statuses []podStatus
	if err := p.do(ctx, http.MethodGet, "/status", pods, &statuses); err != nil {
		return err
	}
	for _, st := range statuses {
		k := providerutil.PodKey(st.Namespace, st.Name)
		p.mu.Lock()
		rec := p.pods[k]
		var changed *corev1.Pod
		if rec != nil && string(rec.Pod.UID) == st.UID {
			next, err := podPhase(rec.Pod, st, rec.Status)
			if err != nil {
				// The pod keeps the status it had; the plugin is asked again
				// at the next poll.
				p.log.Warn("interlink plugin: ignoring a status answer", "pod", k, "error", err)
			} else if rec.Status == nil || !equalStatus(rec.Status, next) {
				rec.Status = next
				changed = rec.Pod.DeepCopy()
				changed.Status = *next.DeepCopy()
			}
		}
		p.mu.Unlock()
		if changed != nil {
			notify(changed)
		}
	}
	return nil
}

func equalStatus(a, b *corev1.PodStatus) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

// Ping asks /status about no pod, as interLink's API server does.
func (p *Provider) Ping(ctx context.Context) error {
	return p.do(ctx, http.MethodGet, "/status", []any{}, nil)
}

// NotifyNodeStatus: the plugin reports no node changes.
func (p *Provider) NotifyNodeStatus(context.Context, func(*corev1.Node)) {}

// ConfigureNode sets the configured capacity.
func (p *Provider) ConfigureNode(_ context.Context, n *corev1.Node) {
	if len(p.cfg.Capacity) == 0 {
		return
	}
	rl := corev1.ResourceList{}
	for k, v := range p.cfg.Capacity {
		if q, err := resource.ParseQuantity(v); err == nil { // LoadConfig checked them
			rl[corev1.ResourceName(k)] = q
		}
	}
	n.Status.Capacity, n.Status.Allocatable = rl, rl.DeepCopy()
}

// GetContainerLogs asks /getLogs.
func (p *Provider) GetContainerLogs(ctx context.Context, namespace, pod, container string, opts provider.ContainerLogOpts) (io.ReadCloser, error) {
	p.mu.Lock()
	rec := p.pods[providerutil.PodKey(namespace, pod)]
	p.mu.Unlock()
	if rec == nil {
		return nil, providerutil.PodNotFound("interlink", namespace, pod)
	}
	req := logRequest{Namespace: namespace, PodUID: string(rec.Pod.UID), PodName: pod, ContainerName: container,
		Opts: logOptions{Tail: opts.Tail, Bytes: int(opts.LimitBytes), Timestamps: opts.Timestamps, Follow: opts.Follow,
			Previous: opts.Previous, SinceSeconds: int(opts.SinceSeconds)}}
	if opts.SinceTime != nil {
		req.Opts.SinceTime = *opts.SinceTime
	}
	if !opts.Follow {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.cfg.Timeout.Duration)
		resp, err := p.request(ctx, http.MethodGet, "/getLogs", req)
		if err != nil {
			cancel()
			return nil, err
		}
		return cancelOnClose{resp.Body, cancel}, nil
	}
	resp, err := p.request(ctx, http.MethodGet, "/getLogs", req)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c cancelOnClose) Close() error { err := c.ReadCloser.Close(); c.cancel(); return err }
