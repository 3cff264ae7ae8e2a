package providerutil

import (
	"testing"

	"github.com/vkubelet/vkubelet/errdefs"
)

func TestPodNotFoundIsOfClassNotFoundAndNamesThePod(t *testing.T) {
	err := PodNotFound("mock", "ns", "web")
	if !errdefs.IsNotFound(err) {
		t.Fatalf("PodNotFound is not of class NotFound: %v", err)
	}
	if got, want := err.Error(), "mock: pod ns/web not found"; got != want {
		t.Errorf("PodNotFound says %q, want %q", got, want)
	}
	if got := PodKey("ns", "web"); got != "ns/web" {
		t.Errorf("PodKey = %q, want ns/web", got)
	}
}
