package node

import (
	"log/slog"
	"regexp"
	"slices"
)

// This file holds the node's declared features (status.declaredFeatures): the
// names the provider gives through provider.FeatureDeclarer, in the form the
// API server takes.

// featureName is the form the API server accepts for a declared feature: an
// UpperCamelCase name, optionally followed by /-separated segments.
var featureName = regexp.MustCompile(`^[A-Z][a-zA-Z0-9]*(/[a-zA-Z][a-zA-Z0-9]*)*$`)

// declaredFeatures is names sorted and without duplicates, as the API server
// wants the list (it refuses a node status whose list is not sorted), less the
// names it would refuse, which are logged: one bad name must not keep the
// node's whole status from being written.
func declaredFeatures(names []string, log *slog.Logger) []string {
	out := make([]string, 0, len(names))
	for _, n := range names {
		if !featureName.MatchString(n) {
			log.Warn("the provider declares a feature under a name the API server refuses; left out", "feature", n)
			continue
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return slices.Compact(out)
}
