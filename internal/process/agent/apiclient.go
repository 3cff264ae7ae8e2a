package agent

import (
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"

	"github.com/vkubelet/vkubelet/internal/version"
)

// This file holds the settings of the node's API client beyond its credential
// (identity.go): rate limits, encoding, user agent and the request counter.

// apiClientConfig is base with the node's client settings: rate limits, encoding,
// user agent, and the request counter.
func apiClientConfig(base *rest.Config, cfg Config, apiRequests *prometheus.CounterVec) (*rest.Config, error) {
	restCfg := rest.CopyConfig(base)
	if cfg.KubeAPIQPS > 0 {
		restCfg.QPS = cfg.KubeAPIQPS
	}
	if cfg.KubeAPIBurst > 0 {
		restCfg.Burst = cfg.KubeAPIBurst
	}
	// Protobuf by default, as the kubelet: the API server encodes the node's watch
	// events and the answers to its writes in it, and the node decodes them, at a
	// fraction of JSON's cost (with JSON the agent took 19.9 CPU seconds instead of
	// 11.2 for 10,000 pods; vkubeletctl bench, docs/PERFORMANCE.md).
	ct := cfg.KubeAPIContentType
	switch ct {
	case "":
		ct = runtime.ContentTypeProtobuf
	case runtime.ContentTypeProtobuf, runtime.ContentTypeJSON:
	default:
		// client-go would accept it and fail every write: refuse it at start.
		return nil, fmt.Errorf("--kube-api-content-type %q: want %s or %s", ct, runtime.ContentTypeProtobuf, runtime.ContentTypeJSON)
	}
	restCfg.ContentType, restCfg.AcceptContentTypes = ct, ct
	if ct != runtime.ContentTypeJSON {
		restCfg.AcceptContentTypes = ct + "," + runtime.ContentTypeJSON
	}
	restCfg.UserAgent = "vkubelet/" + version.Version + " (" + cfg.NodeName + ")"
	restCfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return &countingTransport{next: rt, counter: apiRequests}
	})
	return restCfg, nil
}
