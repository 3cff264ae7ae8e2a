package agent

import (
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// apiRequests counts the agent's requests to the API server by verb and resource,
// so that writes per pod can be measured (vkubeletctl bench reads it).
var apiRequestsOpts = prometheus.CounterOpts{
	Namespace: "vkubelet", Name: "api_requests_total",
	Help: "Requests of the node agent to the API server, by HTTP method, resource (and subresource) and whether it was a watch or a list streamed as one.",
}

// countingTransport wraps the client's transport and counts each request.
type countingTransport struct {
	next    http.RoundTripper
	counter *prometheus.CounterVec
}

func (t *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.counter.WithLabelValues(APIRequestLabels(r)).Inc()
	return t.next.RoundTrip(r)
}

// APIRequestLabels are the verb and resource labels under which
// vkubelet_api_requests_total counts r: the HTTP method, and the resource with
// " (watch)" for a watch or " (watch list)" for a list streamed as one.
func APIRequestLabels(r *http.Request) (verb, resource string) {
	resource = resourceOf(r.URL.Path)
	switch q := r.URL.Query(); {
	case q.Get("watch") == "true" && q.Get("sendInitialEvents") == "true":
		// A list streamed as a watch (client-go's WatchListClient): a relist.
		resource += " (watch list)"
	case q.Get("watch") == "true":
		resource += " (watch)"
	}
	return r.Method, resource
}

// resourceOf extracts "pods", "pods/status", "leases", … from an API path:
// /api/v1/namespaces/ns/pods/name/status → pods/status.
func resourceOf(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	// Drop the group/version prefix: api/v1 or apis/<group>/<version>.
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return "other"
	}
	if len(parts) >= 2 && parts[0] == "namespaces" {
		if len(parts) == 2 {
			return "namespaces"
		}
		parts = parts[2:]
	}
	switch len(parts) {
	case 0:
		return "other"
	case 1, 2:
		return parts[0]
	default:
		return parts[0] + "/" + parts[2]
	}
}
