package provider

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

func TestGracePeriod(t *testing.T) {
	secs := func(s int64) *int64 { return &s }
	for _, tc := range []struct {
		name           string
		deletion, spec *int64
		want           time.Duration
	}{
		{"neither: the API default", nil, nil, 30 * time.Second},
		{"the spec's", nil, secs(5), 5 * time.Second},
		{"the deletion's wins over the spec's", secs(2), secs(5), 2 * time.Second},
		{"a forced deletion", secs(0), secs(5), 0},
		{"negative counts as zero", nil, secs(-1), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &corev1.Pod{}
			p.DeletionGracePeriodSeconds = tc.deletion
			p.Spec.TerminationGracePeriodSeconds = tc.spec
			if got := GracePeriod(p); got != tc.want {
				t.Errorf("GracePeriod = %v, want %v", got, tc.want)
			}
		})
	}
}
