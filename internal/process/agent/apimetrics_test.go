package agent

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

func TestResourceOf(t *testing.T) {
	cases := map[string]string{
		"/api/v1/namespaces/ns/pods":                                       "pods",
		"/api/v1/namespaces/ns/pods/p":                                     "pods",
		"/api/v1/namespaces/ns/pods/p/status":                              "pods/status",
		"/api/v1/namespaces/ns/events":                                     "events",
		"/api/v1/nodes/n":                                                  "nodes",
		"/api/v1/nodes/n/status":                                           "nodes/status",
		"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n": "leases",
		"/api/v1/namespaces/ns":                                            "namespaces",
		"/healthz":                                                         "other",
	}
	for path, want := range cases {
		if got := resourceOf(path); got != want {
			t.Errorf("resourceOf(%q) = %q, want %q", path, got, want)
		}
	}
}

// The node's client speaks protobuf unless told otherwise, and counts what it asks.
func TestAPIClientSpeaksProtobufByDefault(t *testing.T) {
	for _, tc := range []struct{ contentType, wantSent, wantAccept string }{
		{"", "application/vnd.kubernetes.protobuf", "application/vnd.kubernetes.protobuf,application/json"},
		{"application/json", "application/json", "application/json"},
	} {
		var sent, accept string
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			sent, accept = r.Header.Get("Content-Type"), r.Header.Get("Accept")
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"ns"}}`))
		}))
		counter := prometheus.NewCounterVec(apiRequestsOpts, []string{"verb", "resource"})
		cfg, err := apiClientConfig(&rest.Config{Host: srv.URL}, Config{NodeName: "vk", KubeAPIContentType: tc.contentType}, counter)
		if err != nil {
			t.Fatal(err)
		}
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}}
		if _, err := client.CoreV1().Pods("ns").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
			t.Fatalf("%q: %v", tc.contentType, err)
		}
		srv.Close()
		if sent != tc.wantSent || accept != tc.wantAccept {
			t.Errorf("content type %q: sent %q accepting %q; want %q accepting %q", tc.contentType, sent, accept, tc.wantSent, tc.wantAccept)
		}
		var m dto.Metric
		if err := counter.WithLabelValues("POST", "pods").Write(&m); err != nil || m.GetCounter().GetValue() != 1 {
			t.Errorf("content type %q: counted %v creates (%v), want 1", tc.contentType, m.GetCounter().GetValue(), err)
		}
	}
}

func TestAPIClientRefusesAnUnknownContentType(t *testing.T) {
	counter := prometheus.NewCounterVec(apiRequestsOpts, []string{"verb", "resource"})
	if _, err := apiClientConfig(&rest.Config{Host: "https://127.0.0.1:1"}, Config{KubeAPIContentType: "protobuf"}, counter); err == nil {
		t.Fatal("content type \"protobuf\" accepted")
	}
}
