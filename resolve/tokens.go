package resolve

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// maxTokenRefreshesPerSecond bounds how many pods a token check sends for a token
// refresh at once: a node whose pods started in one burst has tokens that all age
// together, and they are refreshed over minutes, not in one storm of TokenRequests.
const maxTokenRefreshesPerSecond = 20

// podToken is a service-account token handed out for a pod's volume, kept to be
// reused and refreshed. A pod keeps its tokens in a short slice: most have one.
type podToken struct {
	serviceAccount    string
	audience          string
	expirationSeconds int64
	// token is the token's bytes, shared with the volume file handed to the
	// provider (read-only, per the provider contract): one copy per pod.
	token []byte
	// refreshAt is when the token is to be replaced (see refreshTime).
	refreshAt time.Time
}

func (t *podToken) is(sa, audience string, expirationSeconds int64) bool {
	return t.serviceAccount == sa && t.audience == audience && t.expirationSeconds == expirationSeconds
}

// refreshTime is when a token issued at issued for ttl is replaced. The kubelet
// replaces a token once 80% of its lifetime has passed, or after 24 hours. Each pod
// takes a point of its own between 70% and 80%, from its UID, so that the tokens
// of pods started together are not all refreshed in the same second.
func refreshTime(uid types.UID, issued time.Time, ttl time.Duration) time.Time {
	h := fnv.New32a()
	_, _ = h.Write([]byte(uid))
	spread := time.Duration(float64(ttl/10) * float64(h.Sum32()) / float64(1<<32))
	at := issued.Add(ttl*8/10 - spread)
	if day := issued.Add(24 * time.Hour); day.Before(at) {
		at = day
	}
	return at
}

// token returns a token of the pod's service account bound to the pod, reusing the
// last one until it is due for refresh.
func (r *Resolver) token(ctx context.Context, pod *corev1.Pod, audience string, expirationSeconds *int64) ([]byte, error) {
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	var exp int64
	if expirationSeconds != nil {
		exp = *expirationSeconds
	}
	now := r.clock.Now()
	key := pod.Namespace + "/" + pod.Name
	r.mu.Lock()
	if p := r.pods[key]; p != nil && p.uid == pod.UID {
		for i := range p.tokens {
			if t := &p.tokens[i]; t.is(sa, audience, exp) && now.Before(t.refreshAt) {
				tok := t.token
				r.mu.Unlock()
				return tok, nil
			}
		}
	}
	r.mu.Unlock()

	var auds []string
	if audience != "" {
		auds = []string{audience}
	}
	tr, err := r.client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			Audiences:         auds,
			ExpirationSeconds: expirationSeconds,
			BoundObjectRef:    &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("requesting a token of service account %s/%s: %w", pod.Namespace, sa, err)
	}
	expires := tr.Status.ExpirationTimestamp.Time
	ttl := expires.Sub(now)
	if tr.Spec.ExpirationSeconds != nil {
		ttl = time.Duration(*tr.Spec.ExpirationSeconds) * time.Second
	}
	issued := expires.Add(-ttl)
	tok := []byte(tr.Status.Token)
	entry := podToken{serviceAccount: sa, audience: audience, expirationSeconds: exp, token: tok,
		refreshAt: refreshTime(pod.UID, issued, ttl)}
	r.mu.Lock()
	if p := r.pods[key]; p != nil && p.uid == pod.UID {
		replaced := false
		for i := range p.tokens {
			if p.tokens[i].is(sa, audience, exp) {
				p.tokens[i], replaced = entry, true
			}
		}
		if !replaced {
			p.tokens = append(p.tokens, entry)
		}
	}
	r.mu.Unlock()
	return tok, nil
}

// checkTokens tells OnChange about pods holding a token due for refresh, the
// oldest due first and at most maxTokenRefreshesPerSecond for each second of the
// check interval; the rest wait for the next check.
func (r *Resolver) checkTokens() {
	now := r.clock.Now()
	type due struct {
		key string
		at  time.Time
	}
	var dues []due
	r.mu.Lock()
	for key, p := range r.pods {
		for i := range p.tokens {
			if at := p.tokens[i].refreshAt; !now.Before(at) {
				dues = append(dues, due{key, at})
				break
			}
		}
	}
	r.mu.Unlock()
	if limit := int(r.checkInterval.Seconds()) * maxTokenRefreshesPerSecond; len(dues) > limit {
		slices.SortFunc(dues, func(a, b due) int { return a.at.Compare(b.at) })
		dues = dues[:max(limit, maxTokenRefreshesPerSecond)]
	}
	for _, d := range dues {
		r.onChange(d.key)
	}
}
