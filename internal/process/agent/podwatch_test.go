package agent

import (
	"strings"
	"testing"

	"github.com/vkubelet/vkubelet/pod"
)

// auto watches every bound pod where the credential may, and a node identity's
// own pods; bound with a node identity, or a value of nothing, is refused.
func TestPodWatchScope(t *testing.T) {
	for _, c := range []struct {
		flag   string
		asNode bool
		want   pod.WatchScope
		err    string
	}{
		{flag: "", want: pod.WatchAuto},
		{flag: "auto", want: pod.WatchAuto},
		{flag: "auto", asNode: true, want: pod.WatchNodePods},
		{flag: "node", want: pod.WatchNodePods},
		{flag: "node", asNode: true, want: pod.WatchNodePods},
		{flag: "bound", want: pod.WatchBoundPods},
		{flag: "bound", asNode: true, err: "Node authorizer"},
		{flag: "cluster", err: "--pod-watch=cluster: want auto, node or bound"},
	} {
		got, err := podWatchScope(c.flag, c.asNode)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q (node identity %v): %v, want an error with %q", c.flag, c.asNode, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%q (node identity %v): %q, %v; want %q", c.flag, c.asNode, got, err, c.want)
		}
	}
	if err := CheckPodWatch("all"); err == nil {
		t.Error("CheckPodWatch took all")
	}
}

// The nodes of a NodeSet on one credential share one watch of every bound pod,
// so asking them to watch per node is refused.
func TestNodesSharingACredentialRefusePodWatchNode(t *testing.T) {
	_, err := NewShared(t.Context(), Config{PodWatch: "node"})
	if err == nil || !strings.Contains(err.Error(), "--pod-watch=node") {
		t.Fatalf("err %v, want one naming --pod-watch=node", err)
	}
}
