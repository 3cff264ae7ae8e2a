package kubeletapi

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
)

// AuthConfig says how callers of the kubelet API are authenticated and authorized.
type AuthConfig struct {
	// Client reaches the API server for TokenReviews and SubjectAccessReviews.
	Client kubernetes.Interface
	// ClientCAFile, if set, authenticates client certificates signed by that CA
	// (the API server's kubelet client certificate, for one).
	ClientCAFile string
	// Cache TTLs, as the kubelet's defaults when zero: tokens 2m, allowed 5m, denied 30s.
	TokenCacheTTL, AllowCacheTTL, DenyCacheTTL time.Duration
}

// NewDelegatingAuth builds the kubelet's authenticator and authorizer: the API
// server decides, through TokenReview and SubjectAccessReview, with answers cached.
// Anonymous requests are not authenticated. The client CA file is watched and
// reloaded when it changes (a rotated cluster CA) until ctx ends.
func NewDelegatingAuth(ctx context.Context, cfg AuthConfig) (authenticator.Request, authorizer.Authorizer, error) {
	if cfg.TokenCacheTTL == 0 {
		cfg.TokenCacheTTL = 2 * time.Minute
	}
	if cfg.AllowCacheTTL == 0 {
		cfg.AllowCacheTTL = 5 * time.Minute
	}
	if cfg.DenyCacheTTL == 0 {
		cfg.DenyCacheTTL = 30 * time.Second
	}
	backoff := &wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}
	authn := authenticatorfactory.DelegatingAuthenticatorConfig{
		TokenAccessReviewClient:  cfg.Client.AuthenticationV1(),
		TokenAccessReviewTimeout: 10 * time.Second,
		WebhookRetryBackoff:      backoff,
		CacheTTL:                 cfg.TokenCacheTTL,
	}
	if cfg.ClientCAFile != "" {
		ca, err := dynamiccertificates.NewDynamicCAContentFromFile("client-ca", cfg.ClientCAFile)
		if err != nil {
			return nil, nil, fmt.Errorf("client CA %s: %w", cfg.ClientCAFile, err)
		}
		// Run also ends the CA's work queue when ctx ends; without it the
		// queue's goroutine outlives the node.
		go ca.Run(ctx, 1)
		authn.ClientCertificateCAContentProvider = ca
	}
	a, _, err := authn.New()
	if err != nil {
		return nil, nil, fmt.Errorf("building the authenticator: %w", err)
	}
	z := newAccessReviews(cfg.Client.AuthorizationV1().SubjectAccessReviews(), cfg.AllowCacheTTL, cfg.DenyCacheTTL,
		*backoff, clock.RealClock{})
	return a, authorizer.AuthorizerFunc(z.Authorize), nil
}

// withAuth authenticates and authorizes every request before next sees it.
func (s *Server) withAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp, ok, err := s.cfg.Authenticator.AuthenticateRequest(r)
		if err != nil || !ok || resp == nil || resp.User == nil || resp.User.GetName() == user.Anonymous {
			if err != nil {
				s.log.Debug("authentication failed", "remote", r.RemoteAddr, "error", err)
			}
			s.cfg.Metrics.denied.WithLabelValues("401", subresourceFor(r.URL.Path)).Inc()
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		attrs := s.attributes(resp.User, r)
		decision, reason, err := s.cfg.Authorizer.Authorize(r.Context(), attrs)
		if err != nil {
			s.log.Warn("authorization failed", "user", attrs.User.GetName(), "error", err)
			http.Error(w, "Authorization error (user="+attrs.User.GetName()+")", http.StatusInternalServerError)
			return
		}
		if decision != authorizer.DecisionAllow {
			msg := fmt.Sprintf("Forbidden (user=%s, verb=%s, resource=nodes, subresource=%s)",
				attrs.User.GetName(), attrs.Verb, attrs.Subresource)
			// At debug, and counted: anyone can make the node log at will otherwise.
			s.log.Debug("request forbidden", "user", attrs.User.GetName(), "path", r.URL.Path, "reason", reason)
			s.cfg.Metrics.denied.WithLabelValues("403", attrs.Subresource).Inc()
			http.Error(w, msg, http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// attributes describes a request the way the kubelet does: an action on this node's
// nodes/<subresource>.
func (s *Server) attributes(u user.Info, r *http.Request) authorizer.AttributesRecord {
	return authorizer.AttributesRecord{
		User:            u,
		Verb:            verbFor(r.Method),
		APIGroup:        "",
		APIVersion:      "v1",
		Resource:        "nodes",
		Subresource:     subresourceFor(r.URL.Path),
		Name:            s.cfg.NodeName,
		ResourceRequest: true,
		Path:            r.URL.Path,
	}
}
