package remote

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

func TestAStopAnswerIsTakenOnce(t *testing.T) {
	var s stopAnswers
	s.keep("ns", "a", &corev1.PodStatus{Phase: corev1.PodRunning})
	s.keep("ns", "b", nil)
	if st, gone, ok := s.take("ns", "a"); !ok || gone || st.Phase != corev1.PodRunning {
		t.Errorf("first take of a: %v %v %v, want its Running status", st, gone, ok)
	}
	if _, _, ok := s.take("ns", "a"); ok {
		t.Error("a was taken twice")
	}
	if _, gone, ok := s.take("ns", "b"); !ok || !gone {
		t.Errorf("take of b: gone %v ok %v, want gone", gone, ok)
	}
	if s.m != nil {
		t.Errorf("the map outlives its answers: %v", s.m)
	}
}

func TestAStopAnswerOlderThanItsTTLIsNotUsed(t *testing.T) {
	now := time.Unix(1000, 0)
	s := stopAnswers{now: func() time.Time { return now }}
	s.keep("ns", "a", nil)
	now = now.Add(stopAnswerTTL + time.Millisecond)
	if _, _, ok := s.take("ns", "a"); ok {
		t.Error("an answer older than stopAnswerTTL was used")
	}
}

func TestStopAnswersNobodyTookAreDropped(t *testing.T) {
	now := time.Unix(1000, 0)
	s := stopAnswers{now: func() time.Time { return now }}
	for i := range 1024 {
		s.keep("ns", string(rune('a'+i%26))+string(rune(i)), nil)
	}
	now = now.Add(2 * stopAnswerTTL)
	s.keep("ns", "fresh", nil)
	if len(s.m) != 1 {
		t.Errorf("%d answers kept, want only the fresh one", len(s.m))
	}
}
