package remote

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/vkubelet/vkubelet/providers/providerutil"
)

// stopAnswerTTL is how long a status StopPod answered may stand for the
// provider's: the pod controller reads a pod's status right after deleting it,
// within the same work item, so an answer older than this was not for that read.
const stopAnswerTTL = time.Second

// stopAnswers keeps the statuses StopPod answered until the GetPodStatus that
// follows each delete takes them: once each, and not after stopAnswerTTL.
// GetPodStatus may be served from a cache (provider.PodLifecycleHandler); this
// one holds an answer no older than the delete that the read follows.
type stopAnswers struct {
	now func() time.Time // time.Now unless a test sets it
	mu  sync.Mutex
	m   map[string]stopAnswer
}

type stopAnswer struct {
	status *corev1.PodStatus // nil: the provider no longer has the pod
	at     time.Time
}

// keep records the status of namespace/name after a delete; nil says the pod
// is gone.
func (s *stopAnswers) keep(namespace, name string, st *corev1.PodStatus) {
	now := s.clock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]stopAnswer{}
	}
	if len(s.m) >= 1024 {
		// Answers nobody took (a delete whose status was never read): drop
		// the stale ones, so the map stays as small as the deletes in flight.
		for k, a := range s.m {
			if now.Sub(a.at) > stopAnswerTTL {
				delete(s.m, k)
			}
		}
	}
	s.m[providerutil.PodKey(namespace, name)] = stopAnswer{status: st, at: now}
}

// take returns and forgets the answer kept for namespace/name, if there is one
// younger than stopAnswerTTL.
func (s *stopAnswers) take(namespace, name string) (st *corev1.PodStatus, gone, ok bool) {
	key := providerutil.PodKey(namespace, name)
	s.mu.Lock()
	a, found := s.m[key]
	if found {
		delete(s.m, key)
		if len(s.m) == 0 {
			s.m = nil // Go never shrinks a map: one burst's deletes are not kept
		}
	}
	s.mu.Unlock()
	if !found || s.clock().Sub(a.at) > stopAnswerTTL {
		return nil, false, false
	}
	return a.status, a.status == nil, true
}

func (s *stopAnswers) clock() time.Time {
	if s.now != nil {
		return s.now()
	}
	return time.Now()
}
