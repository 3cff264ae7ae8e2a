// Package fault holds vkubelet's fault suite: integration tests that break a real
// control plane (or a provider) under a running virtual node and check what the
// node does about it — pods neither lost nor duplicated, statuses converged, the
// node back to work promptly. It has no code of its own; each test says which
// fault it injects and what it proves, and docs/RELIABILITY.md quotes its figures.
package fault
