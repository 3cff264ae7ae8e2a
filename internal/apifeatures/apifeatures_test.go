package apifeatures

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/version"
	fakediscovery "k8s.io/client-go/discovery/fake"
	core "k8s.io/client-go/testing"
)

// server is a fake API server's discovery: its release, and what it serves
// as a default installation of that release does, changed by the options.
func server(gitVersion string, opts ...func(*fakediscovery.FakeDiscovery)) *fakediscovery.FakeDiscovery {
	minor, _, err := releaseOf(&version.Info{GitVersion: gitVersion})
	if err != nil {
		panic(err)
	}
	coreResources := []string{"pods", "pods/status", "pods/binding", "pods/eviction", "pods/ephemeralcontainers",
		"nodes", "nodes/status", "serviceaccounts", "serviceaccounts/token", "configmaps", "secrets", "services", "events"}
	if minor >= 33 {
		coreResources = append(coreResources, "pods/resize") // InPlacePodVerticalScaling on by default
	}
	d := &fakediscovery.FakeDiscovery{Fake: &core.Fake{}, FakedServerVersion: &version.Info{GitVersion: gitVersion}}
	d.Resources = []*metav1.APIResourceList{
		resources("v1", coreResources...),
		resources("coordination.k8s.io/v1", "leases"),
		resources("authentication.k8s.io/v1", "tokenreviews"),
		resources("authorization.k8s.io/v1", "subjectaccessreviews"),
		resources("certificates.k8s.io/v1", "certificatesigningrequests"),
	}
	for _, o := range opts {
		o(d)
	}
	return d
}

func resources(groupVersion string, names ...string) *metav1.APIResourceList {
	l := &metav1.APIResourceList{GroupVersion: groupVersion}
	for _, n := range names {
		l.APIResources = append(l.APIResources, metav1.APIResource{Name: n})
	}
	return l
}

// serving adds a core/v1 resource, as a gate turned on against its default does.
func serving(resource string) func(*fakediscovery.FakeDiscovery) {
	return func(d *fakediscovery.FakeDiscovery) {
		d.Resources[0].APIResources = append(d.Resources[0].APIResources, metav1.APIResource{Name: resource})
	}
}

// without removes a core/v1 resource or a group version.
func without(name string) func(*fakediscovery.FakeDiscovery) {
	return func(d *fakediscovery.FakeDiscovery) {
		var lists []*metav1.APIResourceList
		for _, l := range d.Resources {
			if l.GroupVersion == name {
				continue
			}
			var kept []metav1.APIResource
			for _, r := range l.APIResources {
				if r.Name != name || l.GroupVersion != "v1" {
					kept = append(kept, r)
				}
			}
			l.APIResources = kept
			lists = append(lists, l)
		}
		d.Resources = lists
	}
}

// Each supported release's default installation has the features on by
// default in it, and the node does without the others.
func TestEachReleaseHasTheFeaturesOnByDefaultInIt(t *testing.T) {
	all := []Feature{InPlaceResize, PodLevelResourcesStatus, PodObservedGeneration, NodeDeclaredFeatures}
	cases := []struct {
		server *fakediscovery.FakeDiscovery
		off    []Feature
	}{
		{server("v1.30.14"), all},
		{server("v1.31.0"), all},
		{server("v1.32.2"), all},
		{server("v1.33.13"), []Feature{PodLevelResourcesStatus, PodObservedGeneration, NodeDeclaredFeatures}},
		{server("v1.34.4"), []Feature{PodLevelResourcesStatus, NodeDeclaredFeatures}},
		{server("v1.35.4"), []Feature{PodLevelResourcesStatus}},
		{server("v1.36.3"), nil},
		{server("v1.37.1"), nil},
		{server("v1.38.0"), nil},
	}
	for _, tc := range cases {
		name := tc.server.FakedServerVersion.GitVersion
		t.Run(name, func(t *testing.T) {
			s, err := Detect(context.Background(), tc.server)
			if err != nil {
				t.Fatal(err)
			}
			if s.Version != name {
				t.Errorf("Version = %q, want %q", s.Version, name)
			}
			var off []Feature
			for _, o := range s.Off() {
				off = append(off, o.Feature)
				if !strings.Contains(o.Why, name) || !strings.Contains(o.Why, string(o.Feature)) {
					t.Errorf("why %s is off does not name the release and the feature: %q", o.Feature, o.Why)
				}
			}
			if !reflect.DeepEqual(off, tc.off) {
				t.Errorf("off = %v, want %v", off, tc.off)
			}
			for _, f := range all {
				if want := !contains(tc.off, f); s.Has(f) != want {
					t.Errorf("Has(%s) = %v, want %v", f, s.Has(f), want)
				}
			}
		})
	}
}

func contains(fs []Feature, f Feature) bool {
	for _, x := range fs {
		if x == f {
			return true
		}
	}
	return false
}

// Detect reads the version, the groups and the core resources, and nothing else.
func TestDetectMakesThreeReads(t *testing.T) {
	d := server("v1.34.4")
	if _, err := Detect(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range d.Actions() {
		got = append(got, a.GetVerb()+" "+a.GetResource().Resource)
	}
	if want := []string{"get version", "get group", "get resource"}; !reflect.DeepEqual(got, want) {
		t.Errorf("actions = %q, want %q", got, want)
	}
}

// Below the floor the node refuses, naming the floor.
func TestAReleaseBelowTheFloorIsRefused(t *testing.T) {
	d := server("v1.29.15")
	_, err := Detect(context.Background(), d)
	if !errors.Is(err, ErrUnsupported) {
		t.Fatalf("err = %v, want ErrUnsupported", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "v1.29.15") || !strings.Contains(msg, "v1.30 or later") {
		t.Errorf("the refusal names neither the release nor the floor: %q", msg)
	}
}

// A server that does not serve an API the node needs is refused, naming it.
func TestAServerWithoutARequiredAPIIsRefused(t *testing.T) {
	for _, missing := range []string{"coordination.k8s.io/v1", "authentication.k8s.io/v1", "authorization.k8s.io/v1", "nodes/status", "pods/status", "serviceaccounts/token"} {
		t.Run(missing, func(t *testing.T) {
			_, err := Detect(context.Background(), server("v1.37.1", without(missing)))
			if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), missing) {
				t.Errorf("err = %v, want ErrUnsupported naming %s", err, missing)
			}
		})
	}
}

// pods/resize decides in-place resize whatever the release's default: a
// v1.34 whose operator turned the gate off lacks it, and v1.32 serving it
// under the alpha gate (with status.resize, not the conditions) too.
func TestInPlaceResizeNeedsPodsResizeAndV133sAPI(t *testing.T) {
	cases := []struct {
		server *fakediscovery.FakeDiscovery
		has    bool
		why    string
	}{
		{server("v1.34.4", without("pods/resize")), false, "does not serve pods/resize"},
		{server("v1.32.2", serving("pods/resize")), false, "alpha"},
		{server("v1.33.13"), true, ""},
	}
	for _, tc := range cases {
		s, err := Detect(context.Background(), tc.server)
		if err != nil {
			t.Fatal(err)
		}
		if s.Has(InPlaceResize) != tc.has {
			t.Errorf("%s: Has(InPlaceResize) = %v, want %v", s.Version, s.Has(InPlaceResize), tc.has)
		}
		if why := s.off[InPlaceResize]; !strings.Contains(why, tc.why) {
			t.Errorf("%s: why in-place resize is off = %q, want it to say %q", s.Version, why, tc.why)
		}
	}
}

// A release is read from gitVersion with a vendor's suffix, else from the
// minor field, which some vendors end with "+".
func TestTheReleaseIsReadAsVendorsWriteIt(t *testing.T) {
	cases := []struct {
		info  version.Info
		minor int
		name  string
	}{
		{version.Info{GitVersion: "v1.33.2-eks-1234"}, 33, "v1.33.2-eks-1234"},
		{version.Info{GitVersion: "v1.31.4+k3s1"}, 31, "v1.31.4+k3s1"},
		{version.Info{Major: "1", Minor: "35+"}, 35, "v1.35"},
	}
	for _, tc := range cases {
		minor, name, err := releaseOf(&tc.info)
		if err != nil || minor != tc.minor || name != tc.name {
			t.Errorf("releaseOf(%+v) = %d, %q, %v; want %d, %q", tc.info, minor, name, err, tc.minor, tc.name)
		}
	}
	if _, _, err := releaseOf(&version.Info{GitVersion: "v2.0.0"}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("Kubernetes 2: err = %v, want ErrUnsupported", err)
	}
	if _, _, err := releaseOf(&version.Info{}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("no release: err = %v, want ErrUnsupported", err)
	}
}

// An error reading discovery is returned as one that may pass, not a refusal.
func TestAReadErrorIsNoRefusal(t *testing.T) {
	d := server("v1.37.1")
	d.PrependReactor("get", "group", func(core.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("starting")
	})
	_, err := Detect(context.Background(), d)
	if err == nil || errors.Is(err, ErrUnsupported) || !apierrors.IsServiceUnavailable(err) {
		t.Errorf("err = %v, want the read error, not ErrUnsupported", err)
	}
}

// A nil Set, what a caller that read nothing has, has every feature.
func TestANilSetHasEveryFeature(t *testing.T) {
	var s *Set
	for _, f := range features {
		if !s.Has(f.feature) {
			t.Errorf("nil Set: Has(%s) = false", f.feature)
		}
	}
	if s.Off() != nil {
		t.Errorf("nil Set: Off() = %v", s.Off())
	}
}

// Without lacks what it names, and has the rest.
func TestWithoutLacksWhatItNames(t *testing.T) {
	s := Without(PodObservedGeneration)
	if s.Has(PodObservedGeneration) || !s.Has(InPlaceResize) {
		t.Errorf("Without(PodObservedGeneration): Has = %v, %v; want false, true", s.Has(PodObservedGeneration), s.Has(InPlaceResize))
	}
}
