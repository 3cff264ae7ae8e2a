package agent

import (
	"errors"
	"fmt"

	"github.com/vkubelet/vkubelet/pod"
)

// This file holds the choice of the pods a node with a client of its own watches
// (--pod-watch).

// CheckPodWatch reports whether flag is a value of --pod-watch, before any node
// starts.
func CheckPodWatch(flag string) error {
	_, err := podWatchScope(flag, false)
	return err
}

// podWatchScope is the pod watch of a node with a client of its own, from
// --pod-watch and whether the client is a node identity, which the Node
// authorizer lets watch the node's own pods only.
func podWatchScope(flag string, asNode bool) (pod.WatchScope, error) {
	switch pod.WatchScope(flag) {
	case pod.WatchNodePods:
		return pod.WatchNodePods, nil
	case pod.WatchBoundPods:
		if asNode {
			return "", errors.New("--pod-watch=bound: the node's credential is a node identity (system:node:<name>), which the Node authorizer lets watch the node's own pods only; use auto or node, or a credential with list and watch of pods")
		}
		return pod.WatchBoundPods, nil
	case pod.WatchAuto, "":
		if asNode {
			return pod.WatchNodePods, nil
		}
		return pod.WatchAuto, nil
	}
	return "", fmt.Errorf("--pod-watch=%s: want auto, node or bound", flag)
}
