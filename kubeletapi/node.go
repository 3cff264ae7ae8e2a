package kubeletapi

import (
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vkubelet/vkubelet/provider"
)

// This file holds the routes about the node agent itself rather than its pods:
// its metrics, health, readiness, profiles, and the pods its provider runs. Like
// every route they are behind authentication and authorization (nodes/metrics for
// /metrics, nodes/proxy for the others, as the kubelet maps them).

// nodeRoutes adds the agent's own routes to mux.
func nodeRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /runningpods/", bound((*Server).runningPods))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux.HandleFunc("GET /readyz", bound((*Server).readyz))
	mux.HandleFunc("GET /metrics", bound((*Server).metrics))
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
}

// metrics serves the agent's own metrics (Config.Gatherer); a node without them
// has no such page.
func (s *Server) metrics(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Gatherer == nil {
		http.NotFound(w, r)
		return
	}
	metricsHandler(s.cfg.Gatherer).ServeHTTP(w, r)
}

// readyz answers 200 while Config.Ready says the agent is ready, else 503 with
// the reason.
func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	if s.cfg.Ready != nil {
		if err := s.cfg.Ready(); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
	}
	_, _ = io.WriteString(w, "ok")
}

// runningPods lists the pods the provider runs, as the kubelet's /runningpods/
// lists what its container runtime runs: each pod's namespace, name and UID and
// its containers' names and images, nothing of what the API server holds.
func (s *Server) runningPods(w http.ResponseWriter, r *http.Request) {
	p, ok := s.cfg.Provider.(provider.PodLifecycleHandler)
	if !ok {
		s.notImplemented(w, r, "pod listing")
		return
	}
	pods, err := p.GetPods(r.Context())
	if err != nil {
		s.httpError(w, r, fmt.Errorf("listing running pods: %w", err))
		return
	}
	list := corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}, Items: make([]corev1.Pod, 0, len(pods))}
	for _, pod := range pods {
		list.Items = append(list.Items, runningPod(pod))
	}
	writeJSON(w, &list)
}

// runningPod is what /runningpods/ shows of pod.
func runningPod(pod *corev1.Pod) corev1.Pod {
	out := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}}
	for _, c := range pod.Spec.Containers {
		out.Spec.Containers = append(out.Spec.Containers, corev1.Container{Name: c.Name, Image: c.Image})
	}
	return out
}
