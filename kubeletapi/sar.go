package kubeletapi

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/util/webhook"
	authorizationclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/utils/clock"
)

// accessReviews authorizes a request by asking the API server in a
// SubjectAccessReview, caching its answers: what the kubelet's delegating
// authorizer (k8s.io/apiserver's webhook authorizer, built by
// authorizerfactory) does for the kubelet API. It is ours because that one
// compiles CEL match conditions a delegating authorizer never has, and the CEL
// libraries it links were a tenth of the node's binary (about 6 MB of code and
// tables, resident in every node process).
//
// Like it: the review carries the user (name, UID, groups, extra) and the
// resource or non-resource attributes; answers are cached by the review's
// spec, an allowed one for allowTTL and any other for denyTTL, unless the
// attributes a caller controls are too large (10,000 bytes) to be worth it;
// failed reviews are retried with backoff while the error is one worth
// retrying (webhook.DefaultShouldRetry), then the decision is NoOpinion with
// the error (which withAuth logs). The kubelet API's requests carry no field or label selectors, so
// none are sent.
type accessReviews struct {
	client            authorizationclient.SubjectAccessReviewInterface
	allowTTL, denyTTL time.Duration
	backoff           wait.Backoff
	answers           *cache.LRUExpireCache
}

// maxCachedAttributes is the webhook authorizer's bound on the attributes a
// caller controls for a cached answer: larger ones may be an attempt to fill
// the cache.
const maxCachedAttributes = 10000

func newAccessReviews(client authorizationclient.SubjectAccessReviewInterface, allowTTL, denyTTL time.Duration, backoff wait.Backoff, clk clock.PassiveClock) *accessReviews {
	return &accessReviews{client: client, allowTTL: allowTTL, denyTTL: denyTTL, backoff: backoff,
		answers: cache.NewLRUExpireCacheWithClock(8192, clk)}
}

func (a *accessReviews) Authorize(ctx context.Context, attr authorizer.Attributes) (authorizer.Decision, string, error) {
	review := &authorizationv1.SubjectAccessReview{Spec: reviewSpec(attr)}
	key, err := json.Marshal(review.Spec)
	if err != nil {
		return authorizer.DecisionNoOpinion, "", err
	}
	if cached, ok := a.answers.Get(string(key)); ok {
		review.Status = cached.(authorizationv1.SubjectAccessReviewStatus)
	} else {
		var answer *authorizationv1.SubjectAccessReview
		err := webhook.WithExponentialBackoff(ctx, a.backoff, func() error {
			var err error
			answer, err = a.client.Create(ctx, review, metav1.CreateOptions{})
			return err
		}, webhook.DefaultShouldRetry)
		if err != nil {
			return authorizer.DecisionNoOpinion, "", err
		}
		review.Status = answer.Status
		if cacheable(attr) {
			ttl := a.denyTTL
			if review.Status.Allowed {
				ttl = a.allowTTL
			}
			a.answers.Add(string(key), review.Status, ttl)
		}
	}
	switch s := review.Status; {
	case s.Denied && s.Allowed:
		return authorizer.DecisionDeny, s.Reason, fmt.Errorf("the SubjectAccessReview for %s both allowed and denied", review.Spec.User)
	case s.Denied:
		return authorizer.DecisionDeny, s.Reason, nil
	case s.Allowed:
		return authorizer.DecisionAllow, s.Reason, nil
	default:
		return authorizer.DecisionNoOpinion, s.Reason, nil
	}
}

// reviewSpec is what the review asks: may this user do this?
func reviewSpec(attr authorizer.Attributes) authorizationv1.SubjectAccessReviewSpec {
	var spec authorizationv1.SubjectAccessReviewSpec
	if u := attr.GetUser(); u != nil {
		spec.User, spec.UID, spec.Groups = u.GetName(), u.GetUID(), u.GetGroups()
		if extra := u.GetExtra(); extra != nil {
			spec.Extra = make(map[string]authorizationv1.ExtraValue, len(extra))
			for k, v := range extra {
				spec.Extra[k] = v
			}
		}
	}
	if attr.IsResourceRequest() {
		spec.ResourceAttributes = &authorizationv1.ResourceAttributes{
			Namespace: attr.GetNamespace(), Verb: attr.GetVerb(), Group: attr.GetAPIGroup(),
			Version: attr.GetAPIVersion(), Resource: attr.GetResource(), Subresource: attr.GetSubresource(),
			Name: attr.GetName(),
		}
	} else {
		spec.NonResourceAttributes = &authorizationv1.NonResourceAttributes{Path: attr.GetPath(), Verb: attr.GetVerb()}
	}
	return spec
}

// cacheable says whether an answer about attr may be cached: not when what the
// caller controls of it is large.
func cacheable(attr authorizer.Attributes) bool {
	n := len(attr.GetNamespace()) + len(attr.GetVerb()) + len(attr.GetAPIGroup()) + len(attr.GetAPIVersion()) +
		len(attr.GetResource()) + len(attr.GetSubresource()) + len(attr.GetName()) + len(attr.GetPath())
	return n < maxCachedAttributes
}
