package agent

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/version"
	fakediscovery "k8s.io/client-go/discovery/fake"
	core "k8s.io/client-go/testing"

	"github.com/vkubelet/vkubelet/internal/apifeatures"
)

// fakeServer is the discovery of a default installation of release
// gitVersion, as far as the node reads it.
func fakeServer(gitVersion string) *fakediscovery.FakeDiscovery {
	list := func(gv string, names ...string) *metav1.APIResourceList {
		l := &metav1.APIResourceList{GroupVersion: gv}
		for _, n := range names {
			l.APIResources = append(l.APIResources, metav1.APIResource{Name: n})
		}
		return l
	}
	d := &fakediscovery.FakeDiscovery{Fake: &core.Fake{}, FakedServerVersion: &version.Info{GitVersion: gitVersion}}
	d.Resources = []*metav1.APIResourceList{
		list("v1", "pods", "pods/status", "pods/resize", "nodes", "nodes/status", "serviceaccounts/token"),
		list("coordination.k8s.io/v1", "leases"),
		list("authentication.k8s.io/v1", "tokenreviews"),
		list("authorization.k8s.io/v1", "subjectaccessreviews"),
	}
	return d
}

func bufferLogger() (*slog.Logger, *bytes.Buffer) {
	var b bytes.Buffer
	return slog.New(slog.NewTextHandler(&b, nil)), &b
}

// The nodes of a process read one server's features once, and the node's log
// says once what is off and why.
func TestTheFeaturesAreReadOncePerServerAndLogged(t *testing.T) {
	d := fakeServer("v1.34.4")
	log, out := bufferLogger()
	for range 3 {
		s, err := apiFeatures(context.Background(), "https://once.example:6443", d, log)
		if err != nil {
			t.Fatal(err)
		}
		if s.Has(apifeatures.NodeDeclaredFeatures) {
			t.Error("v1.34.4 has NodeDeclaredFeatures")
		}
	}
	if n := len(d.Actions()); n != 3 {
		t.Errorf("%d reads of the server, want the 3 of one Detect", n)
	}
	for _, f := range []apifeatures.Feature{apifeatures.PodLevelResourcesStatus, apifeatures.NodeDeclaredFeatures} {
		if n := strings.Count(out.String(), "feature="+string(f)); n != 1 {
			t.Errorf("%s is logged off %d times, want once:\n%s", f, n, out)
		}
	}
}

// A release below the floor is refused at once, naming the floor; nothing is
// kept, so a later node asks again.
func TestAServerBelowTheFloorIsRefusedAtOnce(t *testing.T) {
	d := fakeServer("v1.29.15")
	log, _ := bufferLogger()
	_, err := apiFeatures(context.Background(), "https://old.example:6443", d, log)
	if !errors.Is(err, apifeatures.ErrUnsupported) || !strings.Contains(err.Error(), "v1.30 or later") {
		t.Fatalf("err = %v, want a refusal naming v1.30", err)
	}
	if n := len(d.Actions()); n != 3 {
		t.Errorf("%d reads of the server, want the 3 of one Detect, not tried again", n)
	}
}

// A read that may pass (the API server starting) is tried again.
func TestAReadThatMayPassIsTriedAgain(t *testing.T) {
	d := fakeServer("v1.37.1")
	failures := 2
	d.PrependReactor("get", "version", func(core.Action) (bool, runtime.Object, error) {
		if failures == 0 {
			return false, nil, nil
		}
		failures--
		return true, nil, apierrors.NewServiceUnavailable("starting")
	})
	log, out := bufferLogger()
	s, err := detectFeatures(context.Background(), d, log, time.Millisecond)
	if err != nil || s.Version != "v1.37.1" {
		t.Fatalf("detectFeatures = %v, %v; want v1.37.1's features", s, err)
	}
	if n := strings.Count(out.String(), "trying again"); n != 2 {
		t.Errorf("%d retries logged, want 2:\n%s", n, out)
	}
}

// The reads go on at the back-off's cap of 30 s until one passes: reaching the
// cap is no reason to give up (synctest's clock runs the waits).
func TestAReadIsTriedAgainPastTheBackOffsCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := fakeServer("v1.37.1")
		var reads []time.Time
		d.PrependReactor("get", "version", func(core.Action) (bool, runtime.Object, error) {
			reads = append(reads, time.Now())
			if len(reads) <= 10 {
				return true, nil, apierrors.NewServiceUnavailable("starting")
			}
			return false, nil, nil
		})
		log, _ := bufferLogger()
		s, err := detectFeatures(context.Background(), d, log, time.Second)
		if err != nil || s.Version != "v1.37.1" {
			t.Fatalf("detectFeatures = %v, %v; want v1.37.1's features after 10 failed reads", s, err)
		}
		if last := reads[len(reads)-1].Sub(reads[len(reads)-2]); last < 30*time.Second || last > 33*time.Second {
			t.Errorf("the last wait was %s, want the cap of 30s, up to 10%% longer", last)
		}
	})
}
