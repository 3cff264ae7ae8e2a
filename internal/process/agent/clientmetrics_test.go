package agent

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

func TestClientGoMeasuresTheAgentsRequests(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"major":"1","minor":"37","gitVersion":"v1.37.1"}`))
	}))
	defer srv.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(clientMetrics()...)
	c, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Discovery().RESTClient().Get().AbsPath("/version").DoRaw(context.Background()); err != nil {
		t.Fatal(err)
	}
	host := strings.TrimPrefix(srv.URL, "http://")
	if n := testutil.ToFloat64(restClientResults.WithLabelValues("200", "GET", host)); n < 1 {
		t.Errorf("rest_client_requests_total{code=200,method=GET} = %v, want at least 1", n)
	}
	if n, err := testutil.GatherAndCount(reg, "rest_client_request_duration_seconds"); err != nil || n < 1 {
		t.Errorf("rest_client_request_duration_seconds series: %d (%v), want at least 1", n, err)
	}
}
