// Package interlinkplugin is an interLink plugin for tests: the REST API that a
// plugin serves to interLink's API server, or to vkubelet's interlink provider,
// written from the API's description, with vkubelet's mock provider running the
// pods. The interlink provider's tests and the adapter's test of interLink's own
// virtual kubelet (through interLink's API server) run pods on it.
package interlinkplugin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vkubelet/vkubelet/provider"
	"github.com/vkubelet/vkubelet/providers/mock"
)

// Plugin serves /create, /delete, /status and /getLogs on top of a mock provider.
type Plugin struct {
	mock *mock.Provider
	// token, if set, is the bearer token every request must bear; interLink's
	// API server sends none.
	token string

	mu        sync.Mutex
	submitted map[types.UID]Submission // the last create of each pod
	creates   map[types.UID]int
	deletes   map[types.UID]int
}

// Submission is a pod as the plugin was asked to create it.
type Submission struct {
	Pod corev1.Pod `json:"pod"`
	// Containers are the data of the pod's containers: the ConfigMaps, Secrets
	// and projected volumes they mount, as sent.
	Containers []map[string]any `json:"container"`
}

// New returns a plugin running its pods on m, asking callers for token ("":
// for none).
func New(m *mock.Provider, token string) *Plugin {
	return &Plugin{mock: m, token: token,
		submitted: map[types.UID]Submission{}, creates: map[types.UID]int{}, deletes: map[types.UID]int{}}
}

// Submitted returns the last create request of the pod uid and how many
// creates and deletes of it the plugin was asked.
func (p *Plugin) Submitted(uid types.UID) (s Submission, creates, deletes int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.submitted[uid], p.creates[uid], p.deletes[uid]
}

func (p *Plugin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p.token != "" && r.Header.Get("Authorization") != "Bearer "+p.token {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	switch r.Method + " " + r.URL.Path {
	case "POST /create":
		p.create(w, r)
	case "POST /delete":
		p.delete(w, r)
	case "GET /status":
		p.status(w, r)
	case "GET /getLogs":
		p.logs(w, r)
	default:
		http.NotFound(w, r)
	}
}

// create runs the pods of a list of submissions, or of one: vkubelet's
// interlink provider sends a list, interLink's API server one. The answer is
// in kind: the pods' job IDs.
func (p *Plugin) create(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	list := bytes.HasPrefix(bytes.TrimSpace(body), []byte("["))
	var subs []Submission
	if list {
		err = json.Unmarshal(body, &subs)
	} else {
		subs = make([]Submission, 1)
		err = json.Unmarshal(body, &subs[0])
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var out []map[string]string
	for _, s := range subs {
		if err := p.mock.CreatePod(r.Context(), s.Pod.DeepCopy()); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		p.mu.Lock()
		p.submitted[s.Pod.UID] = s
		p.creates[s.Pod.UID]++
		p.mu.Unlock()
		out = append(out, map[string]string{"PodUID": string(s.Pod.UID), "PodJID": jobID(s.Pod.UID)})
	}
	if list {
		_ = json.NewEncoder(w).Encode(out)
	} else {
		_ = json.NewEncoder(w).Encode(out[0])
	}
}

func (p *Plugin) delete(w http.ResponseWriter, r *http.Request) {
	var pod corev1.Pod
	if err := json.NewDecoder(r.Body).Decode(&pod); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	p.mu.Lock()
	p.deletes[pod.UID]++
	p.mu.Unlock()
	if err := p.mock.DeletePod(r.Context(), &pod); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	fmt.Fprint(w, `"OK"`)
}

// status answers the statuses of the pods asked for that the plugin runs.
func (p *Plugin) status(w http.ResponseWriter, r *http.Request) {
	var pods []corev1.Pod
	if err := json.NewDecoder(r.Body).Decode(&pods); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	out := []map[string]any{}
	for _, pod := range pods {
		st, err := p.mock.GetPodStatus(r.Context(), pod.Namespace, pod.Name)
		if err != nil {
			continue
		}
		out = append(out, map[string]any{"name": pod.Name, "UID": string(pod.UID), "namespace": pod.Namespace,
			"JID": jobID(pod.UID), "containers": st.ContainerStatuses, "initContainers": st.InitContainerStatuses})
	}
	_ = json.NewEncoder(w).Encode(out)
}

func (p *Plugin) logs(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Namespace, PodName, ContainerName string
		Opts                              struct{ Tail int }
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	rc, err := p.mock.GetContainerLogs(r.Context(), req.Namespace, req.PodName, req.ContainerName,
		provider.ContainerLogOpts{Tail: req.Opts.Tail, TailSet: req.Opts.Tail > 0})
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	defer rc.Close()
	_, _ = io.Copy(w, rc)
}

func jobID(uid types.UID) string {
	return "job-" + string(uid)[:min(8, len(uid))]
}
