package agent

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// ready says whether the node serves its purpose, for /readyz: the pod
// controller's caches are synced and the node's lease is current, so the cluster
// sees the node alive. nil when ready, else why not.
func (n *Node) ready() error {
	select {
	case <-n.pods.Ready():
	default:
		return errors.New("pod informers not synced yet")
	}
	return n.nodes.LeaseCurrent()
}

// healthzHandler serves /healthz (the process answers) and /readyz (ready) with
// nothing else: the handler of HealthzAddr, reachable without credentials.
func (n *Node) healthzHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := n.ready(); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	return mux
}

// checkLoopback refuses a MetricsAddr other than a loopback one: the endpoint
// serves metrics and profiles to whoever connects.
func checkLoopback(addr string) error {
	if addr == "" {
		return nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--metrics-addr %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("--metrics-addr %q is not a loopback address: it serves metrics and profiles without authentication; "+
		"use --metrics-addr 127.0.0.1:%s (or [::1]:%s), and scrape /metrics on the kubelet port (authorized as nodes/metrics) from elsewhere", addr, port, port)
}

func (n *Node) metricsHandler() http.Handler { return debugHandler(n.gatherer) }

// debugHandler serves the metrics of g, a health check and the process's
// profiles, unauthenticated: only ever on a loopback address (checkLoopback).
func debugHandler(g prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	// Profiles of the agent, for measuring it (vkubeletctl bench).
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	return mux
}
