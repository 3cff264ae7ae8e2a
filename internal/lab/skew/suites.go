package skew

// Suite is one package's tests (all, or those Run matches) and what of the
// wire and the protocols they exercise.
type Suite struct {
	Area    string // what a reader of the matrix is told it covers
	Package string // import path relative to the repository, ./pod
	Run     string // go test -run; empty: every test
}

// DefaultSuites are the tests that touch what differs between releases: the
// objects the node decodes and writes, the APIs of its identity and liveness,
// and the kubelet API that the API server and kubectl reach.
var DefaultSuites = []Suite{
	{Area: "pod lifecycle and status (conditions, readiness, resize, ephemeral containers, deadlines, generation)", Package: "./pod"},
	{Area: "node registration, status, leases and features", Package: "./node"},
	{Area: "pods listed, watched and status-patched by the node's own decoders", Package: "./internal/wire/podwire"},
	{Area: "environment, ConfigMaps, Secrets and service-account tokens (TokenRequest)", Package: "./resolve"},
	{Area: "watch expiry and relist; API-server and etcd restarts", Package: "./internal/lab/fault",
		Run: "TestAnExpiredWatchRelists|TestRestartsOfTheAPIServerAndEtcd"},
	{Area: "the node's identity: client certificate bootstrap (CSR), serving certificate (CSR) and its self-approval, the CSR approver", Package: "./internal/identity"},
	{Area: "kubelet API through the API server: logs, exec, attach, port-forward, stats, metrics (the release's kubectl)", Package: "./kubeletapi"},
	{Area: "the node process: restarts, remove-node", Package: "./cmd/vkubelet",
		Run: "TestRestartAfterSIGKILLCreatesEveryPodExactlyOnce|TestRemoveNodeDrainsARunningNodeAndDeletesIt"},
	{Area: "the chart's install, helm test and uninstall", Package: "./internal/lab/deploy",
		Run: "TestTheChartRunsVkubeletOnAVkubeletNode|TestTheUninstallHookRemovesTheReleasesNodesAlone"},
	{Area: "real containers (CRI): kubectl debug's steps (an ephemeral container) and in-place resize through the API", Package: "./providers/cri/e2e",
		Run: "TestEphemeralContainerThroughTheAPI|TestAPodIsResizedInPlaceThroughTheAPI|TestPodLevelResourcesAreResizedThroughTheAPI"},
	{Area: "upstream virtual-kubelet's mock through the adapter (upstream e2e's basics)", Package: "./upstream",
		Run: "TestUpstreamsMockRunsANodeThroughTheAdapter"},
}
