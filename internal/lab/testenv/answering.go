package testenv

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// AnsweringClient returns a protobuf clientset of an HTTP/2 server, over TLS as
// an API server is reached, that reads each request and answers it with status
// and body (an object already encoded): for benchmarks of a request's round
// trip without an API server's work in it. The clientset has a rate limiter, as
// a node's has, that never makes a loop wait.
func AnsweringClient(tb testing.TB, status int, body []byte) kubernetes.Interface {
	tb.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", runtime.ContentTypeProtobuf)
		w.WriteHeader(status)
		_, _ = w.Write(body)
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	tb.Cleanup(srv.Close)
	client, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL, QPS: 1e6, Burst: 1e6,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true}, ContentConfig: rest.ContentConfig{ContentType: runtime.ContentTypeProtobuf}})
	if err != nil {
		tb.Fatal(err)
	}
	return client
}
