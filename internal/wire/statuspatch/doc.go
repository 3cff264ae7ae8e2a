// Package statuspatch writes the strategic-merge patch of a pod's status, from
// the status the API server has to the one the node wants, straight from the
// two structs.
//
// The pod controller sends one such patch per status change of every pod of
// its node, and comparing two statuses is the work of every status sync. The
// generic way (strategicpatch.CreateTwoWayMergePatch, equality.Semantic) encodes
// and decodes both statuses as JSON: 15 % of the CPU of a node starting
// hundreds of pods a second. Build writes the same patch in meaning, and tells
// an unchanged status without allocating; its tests hold it to the generic
// diff. It is not a general strategic-merge library: it knows PodStatus alone,
// and sends whatever it does not know through the generic diff.
//
// The pod controller (pod/) is its only caller.
package statuspatch
