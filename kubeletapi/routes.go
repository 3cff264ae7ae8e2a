package kubeletapi

import (
	"context"
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// The routes are the same for every node, so a process builds them once and each
// request finds its node in its context: a thousand nodes in one process would
// otherwise hold a thousand copies of the same routing tree (about 11 KiB each).

// serverKey is the context key of the Server a request is for.
type serverKey struct{}

// withServer is ctx carrying s.
func withServer(ctx context.Context, s *Server) context.Context {
	return context.WithValue(ctx, serverKey{}, s)
}

// serverOf is the Server of a request that went through withServer.
func serverOf(ctx context.Context) *Server {
	s, _ := ctx.Value(serverKey{}).(*Server)
	return s
}

// bound turns a method of Server into a handler that calls it on the request's Server.
func bound(method func(*Server, http.ResponseWriter, *http.Request)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		method(serverOf(r.Context()), w, r)
	}
}

var (
	routesOnce sync.Once
	routes     *http.ServeMux
)

// theRoutes is the kubelet API's routing, built on first use.
func theRoutes() *http.ServeMux {
	routesOnce.Do(func() {
		mux := http.NewServeMux()
		mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", bound((*Server).containerLogs))
		for _, p := range []string{"/exec/{namespace}/{pod}/{container}", "/exec/{namespace}/{pod}/{uid}/{container}"} {
			mux.HandleFunc(p, upgradable(bound((*Server).exec)))
		}
		for _, p := range []string{"/attach/{namespace}/{pod}/{container}", "/attach/{namespace}/{pod}/{uid}/{container}"} {
			mux.HandleFunc(p, upgradable(bound((*Server).attach)))
		}
		for _, p := range []string{"/portForward/{namespace}/{pod}", "/portForward/{namespace}/{pod}/{uid}"} {
			mux.HandleFunc(p, upgradable(bound((*Server).portForward)))
		}
		mux.HandleFunc("GET /stats/summary", bound((*Server).statsSummary))
		mux.HandleFunc("GET /metrics/resource", bound((*Server).metricsResource))
		mux.HandleFunc("GET /pods", bound((*Server).pods))
		nodeRoutes(mux)
		routes = mux
	})
	return routes
}

// metricsHandlers keeps one promhttp handler per gatherer: the nodes of a
// process that share their metrics share the handler too.
var metricsHandlers sync.Map // prometheus.Gatherer → http.Handler

func metricsHandler(g prometheus.Gatherer) http.Handler {
	if h, ok := metricsHandlers.Load(g); ok {
		return h.(http.Handler)
	}
	h, _ := metricsHandlers.LoadOrStore(g, promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	return h.(http.Handler)
}
