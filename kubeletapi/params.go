package kubeletapi

import (
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/vkubelet/vkubelet/provider"
)

// parseLogOptions reads the kubelet's /containerLogs query parameters, with the
// kubelet's validation: tailLines ≥ 0, limitBytes ≥ 1, sinceSeconds ≥ 1, and
// sinceSeconds and sinceTime not both.
func parseLogOptions(q url.Values) (provider.ContainerLogOpts, error) {
	var o provider.ContainerLogOpts
	var err error
	if o.Follow, err = boolParam(q, "follow"); err != nil {
		return o, err
	}
	if o.Previous, err = boolParam(q, "previous"); err != nil {
		return o, err
	}
	if o.Timestamps, err = boolParam(q, "timestamps"); err != nil {
		return o, err
	}
	if v := q.Get("tailLines"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 || n > 1<<31 {
			return o, fmt.Errorf("tailLines %q: must be a non-negative integer", v)
		}
		o.Tail, o.TailSet = int(n), true
	}
	if v := q.Get("limitBytes"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return o, fmt.Errorf("limitBytes %q: must be a positive integer", v)
		}
		o.LimitBytes = n
	}
	if v := q.Get("sinceSeconds"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return o, fmt.Errorf("sinceSeconds %q: must be a positive integer", v)
		}
		o.SinceSeconds = n
	}
	if v := q.Get("sinceTime"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return o, fmt.Errorf("sinceTime %q: must be an RFC 3339 time", v)
		}
		o.SinceTime = &t
	}
	if o.SinceSeconds != 0 && o.SinceTime != nil {
		return o, fmt.Errorf("at most one of sinceSeconds and sinceTime may be given")
	}
	return o, nil
}

// boolParam reads a boolean query parameter; absent is false.
func boolParam(q url.Values, name string) (bool, error) {
	v := q.Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%s %q: must be a boolean", name, v)
	}
	return b, nil
}

// subresourceFor maps a request path to the nodes/<subresource> the kubelet checks
// with a SubjectAccessReview: stats, metrics and log have their own, everything else
// (exec, attach, portForward, containerLogs, pods, healthz) is "proxy".
func subresourceFor(path string) string {
	switch {
	case isSubpath(path, "/stats"):
		return "stats"
	case isSubpath(path, "/metrics"):
		return "metrics"
	case isSubpath(path, "/logs"):
		return "log"
	default:
		return "proxy"
	}
}

func isSubpath(path, prefix string) bool {
	return path == prefix || len(path) > len(prefix) && path[:len(prefix)] == prefix && path[len(prefix)] == '/'
}

// verbFor maps an HTTP method to the authorization verb, as the kubelet does.
func verbFor(method string) string {
	switch method {
	case "POST":
		return "create"
	case "GET", "HEAD":
		return "get"
	case "PUT":
		return "update"
	case "PATCH":
		return "patch"
	case "DELETE":
		return "delete"
	default:
		return ""
	}
}
