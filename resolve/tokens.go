package resolve

import (
	"context"
	"fmt"
	"iter"
	"slices"
	"time"
	"unique"

	"github.com/vkubelet/vkubelet/internal/compact/tokenpack"
	"github.com/vkubelet/vkubelet/internal/compact/unixtime"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
)

// Token refresh is paced. A token may be refreshed once 15% of its lifetime has
// passed and must be by 80% (at most 24 hours after it was issued, as the kubelet
// refreshes it). Between the two, the resolver refreshes the tokens it holds
// oldest first at a steady rate: Σ 1/(60% of each token's lifetime), so each
// token is refreshed once per 60% of its lifetime on average and the last of a
// burst at 75%, with time to spare before 80%. A node whose 10,000 pods started in one minute with one-hour
// tokens refreshes them at 4.6 a second, evenly, rather than all in the few
// minutes they come due together; a node with few pods refreshes each at about
// 60% of its lifetime. Tokens past 80% go first, beyond the rate if need be, up to
// maxTokenRefreshesPerSecond.
const maxTokenRefreshesPerSecond = 20

// podToken is a service-account token handed out for a pod's volume, kept to be
// reused and refreshed. A pod keeps its tokens in a short slice: most have one.
type podToken struct {
	// request is what the token was requested for: the same for many pods,
	// one copy for all of them (unique.Make), 8 bytes where its fields took
	// 40 and put every pod's entry in the next size class (96 against 64).
	request unique.Handle[tokenRequest]
	// token is the token, packed (about a third of its bytes): it is kept for
	// the pod's life, and each resolution hands out a copy rebuilt from it,
	// the provider's to keep or drop.
	token tokenpack.Token
	// eligibleAt is when the token may be refreshed; refreshAt is when it must
	// be, and until when it is reused. checkTokens sets refreshAt to now for the
	// tokens it sends for refresh, so the next resolution asks for new ones.
	// (8 bytes each, not a time.Time's 24: one entry per pod.)
	eligibleAt, refreshAt unixtime.Instant
	// period is 60% of the token's lifetime: its share of the refresh rate is
	// one refresh per period.
	period time.Duration
}

// podTokens are a pod's tokens: the first inline, as most pods have one token
// or none, the others after it.
type podTokens struct {
	first podToken // zero (no request) for none
	more  []podToken
}

// all yields each token, to read or change in place.
func (ts *podTokens) all() iter.Seq[*podToken] {
	return func(yield func(*podToken) bool) {
		if ts.first.request == (unique.Handle[tokenRequest]{}) || !yield(&ts.first) {
			return
		}
		for i := range ts.more {
			if !yield(&ts.more[i]) {
				return
			}
		}
	}
}

// put keeps t in place of the token of the same request, or as one more.
func (ts *podTokens) put(t podToken) {
	for old := range ts.all() {
		if old.request == t.request {
			*old = t
			return
		}
	}
	if ts.first.request == (unique.Handle[tokenRequest]{}) {
		ts.first = t
		return
	}
	ts.more = append(ts.more, t)
}

// tokenRequest is what a token is requested for: a service account, an
// audience ("" for the API server's) and a lifetime in seconds (0: the API
// server's default).
type tokenRequest struct {
	serviceAccount    string
	audience          string
	expirationSeconds int64
}

// refreshWindow is when a token issued at issued for ttl may be refreshed, when it
// must be, and its refresh period (see above). Lifetimes beyond 30 hours count as
// 30, so that a token is refreshed within 24 hours, as the kubelet does.
func refreshWindow(issued time.Time, ttl time.Duration) (eligible, due time.Time, period time.Duration) {
	span := min(ttl, 30*time.Hour)
	return issued.Add(span * 15 / 100), issued.Add(span * 4 / 5), span * 3 / 5
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
	request := unique.Make(tokenRequest{serviceAccount: sa, audience: audience, expirationSeconds: exp})
	now := r.clock.Now()
	r.mu.Lock()
	if p := r.pods.of(pod.Namespace, pod.Name); p != nil && p.uid == pod.UID {
		for t := range p.tokens.all() {
			if t.request == request && now.Before(t.refreshAt.Time()) {
				packed := t.token
				r.mu.Unlock()
				return packed.Bytes(), nil
			}
		}
	}
	r.mu.Unlock()

	var auds []string
	if audience != "" {
		auds = []string{audience}
	}
	tr, err := requestToken(ctx, r.client, pod.Namespace, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			Audiences:         auds,
			ExpirationSeconds: expirationSeconds,
			BoundObjectRef:    &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID},
		},
	})
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
	eligible, due, period := refreshWindow(issued, ttl)
	entry := podToken{request: request, token: tokenpack.Pack(tok),
		eligibleAt: unixtime.Of(eligible), refreshAt: unixtime.Of(due), period: period}
	r.mu.Lock()
	if p := r.pods.of(pod.Namespace, pod.Name); p != nil && p.uid == pod.UID {
		p.tokens.put(entry)
	}
	r.mu.Unlock()
	return tok, nil
}

// checkTokens sends pods for a token refresh (OnChange), at the pace described
// above: the check accrues the rate owed since the last one, at most one check
// interval's worth (time with nothing to refresh is not saved up for a burst), and
// spends it on eligible pods, oldest first; pods with a token past due go first
// and regardless of the budget. A pod sent is not sent again for two intervals
// unless a new token makes it eligible: one whose provider takes no volume
// updates keeps its token, and must not starve the others.
func (r *Resolver) checkTokens() {
	now := r.clock.Now()
	type candidate struct {
		pod      podName
		refs     *podRefs
		eligible time.Time
		overdue  bool
	}
	var cands []candidate
	var rate float64 // refreshes owed per second
	r.mu.Lock()
	for n, p := range r.pods.all() {
		c := candidate{pod: n, refs: p}
		found := false
		for t := range p.tokens.all() {
			if t.period > 0 {
				rate += 1 / t.period.Seconds()
			}
			eligible := t.eligibleAt.Time()
			if now.Before(eligible) {
				continue
			}
			if !found || eligible.Before(c.eligible) {
				c.eligible = eligible
			}
			c.overdue = c.overdue || !now.Before(t.refreshAt.Time())
			found = true
		}
		if found {
			cands = append(cands, c)
		}
	}
	elapsed := r.checkInterval
	if !r.lastTokenCheck.IsZero() {
		elapsed = now.Sub(r.lastTokenCheck)
	}
	r.lastTokenCheck = now
	r.refreshBudget = min(r.refreshBudget+rate*elapsed.Seconds(), max(1, rate*r.checkInterval.Seconds()))
	slices.SortFunc(cands, func(a, b candidate) int {
		if a.overdue != b.overdue {
			if a.overdue {
				return -1
			}
			return 1
		}
		return a.eligible.Compare(b.eligible)
	})
	hardCap := max(1, int(r.checkInterval.Seconds())*maxTokenRefreshesPerSecond)
	n := 0
	for _, c := range cands {
		if n == hardCap || !c.overdue && r.refreshBudget < 1-1e-9 { // (float sums of the rate)
			break
		}
		n++
		r.refreshBudget--
	}
	// Past-due tokens may overdraw the budget; the debt is bounded so that the
	// others are not held back for long.
	r.refreshBudget = max(r.refreshBudget, -float64(hardCap))
	chosen := cands[:n]
	for _, c := range chosen {
		for t := range c.refs.tokens.all() {
			if !now.Before(t.eligibleAt.Time()) {
				t.refreshAt, t.eligibleAt = unixtime.Of(now), unixtime.Of(now.Add(2*r.checkInterval))
			}
		}
	}
	r.mu.Unlock()
	for _, c := range chosen {
		r.onChange(c.pod.key())
	}
}
