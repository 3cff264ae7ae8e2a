package apifeatures

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apimachinery/pkg/version"
)

// Floor is the minor of the oldest Kubernetes release vkubelet supports:
// v1.30, the first with ValidatingAdmissionPolicy v1 (the chart's) and the
// oldest of the version-skew matrix.
const Floor = 30

// ErrUnsupported is wrapped by the errors of Detect and Decide that say the
// node cannot run against the server at all: trying again does not help.
var ErrUnsupported = errors.New("unsupported API server")

// Feature is a feature of the API that the node writes to and a release may
// lack, named by its Kubernetes feature gate.
type Feature string

// The features the node does without on a release that lacks them.
const (
	// InPlaceResize is in-place pod resize as v1.33 made it: the pods/resize
	// subresource, the container statuses' allocatedResources and resources,
	// and the PodResizePending and PodResizeInProgress conditions
	// (InPlacePodVerticalScaling: alpha v1.27, beta and on by default v1.33,
	// GA v1.35). The server serves pods/resize only with the gate on, so
	// discovery tells. v1.32 serves it under the alpha gate with another
	// status (status.resize, which v1.33 replaced by the conditions), which
	// the node does not write: there the feature is off too.
	InPlaceResize Feature = "InPlacePodVerticalScaling"
	// PodLevelResourcesStatus is a pod's own status.allocatedResources and
	// status.resources (InPlacePodLevelResourcesVerticalScaling: alpha v1.35,
	// beta and on by default v1.36).
	PodLevelResourcesStatus Feature = "InPlacePodLevelResourcesVerticalScaling"
	// PodObservedGeneration is a pod's status.observedGeneration and its
	// conditions' (PodObservedGenerationTracking: alpha v1.33, beta and on by
	// default v1.34, GA v1.35).
	PodObservedGeneration Feature = "PodObservedGenerationTracking"
	// NodeDeclaredFeatures is a node's status.declaredFeatures
	// (NodeDeclaredFeatures: alpha v1.35, beta and on by default v1.36, GA
	// v1.37). v1.35 has it from its alpha on: its nodes/status keeps what a
	// node writes there whether the gate is on or not, and an operator who
	// turned the gate on has pods that need a feature kept off nodes that
	// do not declare it. Before v1.35 the field is unknown to the server.
	NodeDeclaredFeatures Feature = "NodeDeclaredFeatures"
)

// features are the features in the order Off lists them, each with the first
// release the node uses it on, its gate's history, and what the node does
// without it.
var features = []struct {
	feature Feature
	minor   int
	history string
	without string
}{
	{InPlaceResize, 33, "alpha v1.27, on by default v1.33, GA v1.35",
		"pods' container statuses carry no allocated resources, as a kubelet's without in-place resize"},
	{PodLevelResourcesStatus, 36, "alpha v1.35, on by default v1.36",
		"pods' status.resources and status.allocatedResources are not written"},
	{PodObservedGeneration, 34, "alpha v1.33, on by default v1.34, GA v1.35",
		"pods' status.observedGeneration and their conditions' are not written"},
	{NodeDeclaredFeatures, 35, "the field from v1.35, on by default v1.36, GA v1.37",
		"the node's status.declaredFeatures is not written: the provider's declared features are not advertised"},
}

// FirstRelease returns the minor of the first release on which the node uses
// f (where its gate is on by default), or 0 for a feature it does not know.
func FirstRelease(f Feature) int {
	for _, ft := range features {
		if ft.feature == f {
			return ft.minor
		}
	}
	return 0
}

// requiredGroups and requiredCore are the APIs the node cannot do without.
// Every release from Floor on serves them unless its operator turned them off
// (--runtime-config).
var (
	requiredGroups = []struct{ groupVersion, use string }{
		{"coordination.k8s.io/v1", "the node's Lease"},
		{"authentication.k8s.io/v1", "TokenReview, authenticating the kubelet API's callers"},
		{"authorization.k8s.io/v1", "SubjectAccessReview, authorizing the kubelet API's callers"},
	}
	requiredCore = []struct{ resource, use string }{
		{"nodes/status", "the node's status"},
		{"pods/status", "the pods' statuses"},
		{"serviceaccounts/token", "service-account tokens (TokenRequest)"},
	}
)

// Set is what one API server has of the features the node writes to.
type Set struct {
	// Version is the server's release, as its /version says (gitVersion).
	Version string
	// off holds why each feature the server lacks is off.
	off map[Feature]string
}

// Has reports whether the server has feature f. A nil Set has every feature.
func (s *Set) Has(f Feature) bool {
	return s == nil || s.off[f] == ""
}

// Without is a Set with every feature but fs, as a server that lacks them
// has: for the tests of the controllers' fallbacks, and callers that know
// the server without asking it.
func Without(fs ...Feature) *Set {
	s := &Set{off: map[Feature]string{}}
	for _, f := range fs {
		s.off[f] = string(f) + " is off"
	}
	return s
}

// Off is a feature the server lacks and why, with what the node does instead.
type Off struct {
	Feature Feature
	Why     string
}

// Off lists the features the server lacks, in a fixed order.
func (s *Set) Off() []Off {
	if s == nil {
		return nil
	}
	var out []Off
	for _, f := range features {
		if why := s.off[f.feature]; why != "" {
			out = append(out, Off{f.feature, why})
		}
	}
	return out
}

// Discovery is what Detect reads of the API server: the part of client-go's
// discovery client (discovery.DiscoveryInterfaceWithContext) it uses.
type Discovery interface {
	ServerVersionWithContext(ctx context.Context) (*version.Info, error)
	ServerGroupsWithContext(ctx context.Context) (*metav1.APIGroupList, error)
	ServerResourcesForGroupVersionWithContext(ctx context.Context, groupVersion string) (*metav1.APIResourceList, error)
}

// Detect reads the server's version, its API groups and its core/v1
// resources (three requests, which any authenticated client may make) and
// decides the features (Decide). An error that wraps ErrUnsupported is final;
// any other is one of reading, which may pass.
func Detect(ctx context.Context, d Discovery) (*Set, error) {
	v, err := d.ServerVersionWithContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the API server's version: %w", err)
	}
	groups, err := d.ServerGroupsWithContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the API server's API groups: %w", err)
	}
	core, err := d.ServerResourcesForGroupVersionWithContext(ctx, "v1")
	if err != nil {
		return nil, fmt.Errorf("reading the API server's core/v1 resources: %w", err)
	}
	return Decide(v, groups, core)
}

// Decide is the rule: the features of a server whose /version said v, whose
// discovery listed groups and the core/v1 resources core. It refuses
// (ErrUnsupported) a release below Floor and a server without a required API.
func Decide(v *version.Info, groups *metav1.APIGroupList, core *metav1.APIResourceList) (*Set, error) {
	minor, name, err := releaseOf(v)
	if err != nil {
		return nil, err
	}
	if minor < Floor {
		return nil, fmt.Errorf("%w: the API server runs Kubernetes %s; vkubelet needs v1.%d or later", ErrUnsupported, name, Floor)
	}
	served := map[string]bool{}
	for _, g := range groups.Groups {
		for _, gv := range g.Versions {
			served[gv.GroupVersion] = true
		}
	}
	for _, r := range core.APIResources {
		served[r.Name] = true
	}
	for _, g := range requiredGroups {
		if !served[g.groupVersion] {
			return nil, fmt.Errorf("%w: the API server (Kubernetes %s) does not serve %s, which vkubelet needs for %s; every release from v1.%d serves it unless turned off (--runtime-config)", ErrUnsupported, name, g.groupVersion, g.use, Floor)
		}
	}
	for _, r := range requiredCore {
		if !served[r.resource] {
			return nil, fmt.Errorf("%w: the API server (Kubernetes %s) does not serve %s in core/v1, which vkubelet needs for %s", ErrUnsupported, name, r.resource, r.use)
		}
	}
	s := &Set{Version: name, off: map[Feature]string{}}
	for _, f := range features {
		switch {
		case f.feature == InPlaceResize && !served["pods/resize"]:
			s.off[f.feature] = fmt.Sprintf("Kubernetes %s does not serve pods/resize (%s is off; %s): %s", name, f.feature, f.history, f.without)
		case f.feature == InPlaceResize && minor < f.minor:
			s.off[f.feature] = fmt.Sprintf("Kubernetes %s serves pods/resize under the alpha %s, whose resize status (status.resize) vkubelet does not write; it resizes in place with v1.%d's API: %s", name, f.feature, f.minor, f.without)
		case minor < f.minor:
			s.off[f.feature] = fmt.Sprintf("Kubernetes %s lacks %s (%s): %s", name, f.feature, f.history, f.without)
		}
	}
	return s, nil
}

// releaseOf is the minor of the release v names and its name: from its
// gitVersion (v1.34.4, v1.34.4-gke.1), else from its major and minor fields
// (minor "34" or "34+").
func releaseOf(v *version.Info) (minor int, name string, err error) {
	if parsed, err := utilversion.ParseGeneric(v.GitVersion); err == nil {
		if parsed.Major() != 1 {
			return 0, "", fmt.Errorf("%w: the API server runs Kubernetes %s; vkubelet speaks Kubernetes 1", ErrUnsupported, v.GitVersion)
		}
		return int(parsed.Minor()), v.GitVersion, nil
	}
	minor, err = strconv.Atoi(strings.TrimSuffix(v.Minor, "+"))
	if err != nil || v.Major != "1" {
		return 0, "", fmt.Errorf("%w: the API server's /version names no Kubernetes release (gitVersion %q, major %q, minor %q)", ErrUnsupported, v.GitVersion, v.Major, v.Minor)
	}
	return minor, "v1." + strconv.Itoa(minor), nil
}
