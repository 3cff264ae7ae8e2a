// Package deploy tests vkubelet as it is deployed into a cluster: the Helm chart in
// charts/vkubelet, driven by a real helm against the test control plane, runs
// vkubelet's own image (internal/lab/image) on a vkubelet CRI node, and the node that
// pod registers runs pods in its turn (the dogfood test). The plain manifests in
// deploy/ are checked to be the chart's rendering. It has no code of its own.
package deploy
