// Package mock is an in-memory provider that pretends to run pods. It is what
// `vkubeletctl up` uses by default, and what the tests of the node and pod controllers,
// of the kubelet API and the 10,000-pod benchmark run against. It runs nothing: every
// pod's status is a function of a few timestamps and the clock, so it is cheap (no
// goroutine or timer per pod) and, with WithClock and a fake clock, deterministic.
// It implements every interface of package provider; it knows nothing of the
// controllers.
//
// # Pods
//
// CreatePod accepts a pod at once. Until Config.StartDelay has passed it reports:
//   - phase Pending, startTime and hostIP set, no podIP;
//   - conditions PodScheduled and Initialized True (Initialized False,
//     ContainersNotInitialized, with regular init containers), PodReadyToStartContainers
//     False (PodSandboxNotReady), ContainersReady and Ready False (ContainersNotReady);
//   - every container Waiting, reason ContainerCreating (PodInitializing when the pod
//     has regular init containers, and for the init containers).
//
// From then on it reports:
//   - phase Running, podIP from a counter (10.244.0.1, 10.244.0.2, … persisted with
//     the StateFile) or the hostIP for hostNetwork pods;
//   - every condition True, transition time the start time (PodScheduled: creation);
//   - containers and sidecar init containers Running since the start time, ready,
//     started, restartCount 0, imageID "mock://<image>", containerID
//     "mock://<pod uid>/<container>"; regular init containers Terminated, exit code 0,
//     reason Completed.
//
// hostIP is the WithHostIP option, else the InternalIP of the node last passed to
// ConfigureNode, else 10.0.0.1. qosClass is kept from the pod given. Nothing ever
// fails or restarts by itself.
//
// CreatePod of a pod the mock has with the same UID does nothing and succeeds; with a
// different UID the new pod replaces the old one. UpdatePod stores the new pod (the
// reported images follow its spec) and leaves its state alone.
//
// DeletePod returns at once. The pod goes on running until min(StopDelay, grace
// period) and StopOverrun have passed, the grace period being
// pod.DeletionGracePeriodSeconds, else spec.terminationGracePeriodSeconds, else
// 30s; a later DeletePod may shorten that.
// Then the pod stops: its last status (containers Terminated, exit code 0, reason
// Completed; Ready and ContainersReady False, reason PodCompleted; phase unchanged) is
// sent to the NotifyPods callback, the pod is dropped from memory, and GetPod,
// GetPodStatus and GetPods no longer find it (NotFound).
//
// The NotifyPods callback receives a copy of the pod when it is created, starts
// running, is updated and stops, in that order for each pod, from a single goroutine
// that lives as long as the context given to NotifyPods, and never under the mock's
// lock. Without NotifyPods the mock works the same, by polling.
//
// # Failures and persistence
//
// Config.FailureRate is the fraction of CreatePod, UpdatePod and DeletePod calls that
// fail, before doing anything, with an errdefs.Unavailable error ("injected
// failure"), drawn from an RNG seeded with Config.Seed. SetPingError makes Ping fail.
// Config.Latency makes CreatePod, UpdatePod, DeletePod and GetPodStatus answer that
// much later, as a remote back end would (faults.go).
//
// With Config.StateFile, the pods (with their timestamps), the pod IP counter and the
// CreateCount and DeleteCalls counts are written to that file, replaced atomically by
// rename, before every change returns; New reads it back, so a process killed and
// restarted finds its pods where the clock says they should be. The counts of a pod
// are kept 10 minutes after it stopped, then forgotten, so that a mock node under
// churn does not keep a count of every pod it ever ran.
//
// # Node, stats and streams
//
// ConfigureNode sets capacity and allocatable (Config.CPU, Memory, Pods, Extended),
// spec.providerID (default "mock://<node>") and the zone and region topology labels.
// GetStatsSummary and GetMetricsResource report synthetic usage (see stats.go): each
// running container uses half its requests (or 10m CPU and 16Mi), the node 100m and
// 256Mi more. Logs, exec, attach and port-forward are scripted echoes, described on
// their methods. Calls about an unknown pod or container return errdefs.NotFound
// errors that name it; calls about a container that is not running, an InvalidInput
// error.
//
// # Resolved pods
//
// The mock is a ResolvedPodHandler and a VolumeUpdater: it keeps the last resolved
// pod of each pod (environment, volume files, pull credentials; not persisted) and
// counts UpdatePodVolumes calls. Exec of `env` prints the resolved environment and
// `cat /<mountPath>/<file>` a resolved volume file, so tests can check resolution
// end to end through kubectl exec.
//
// The exported methods that are not part of the provider contract (SetPingError,
// SetCapacity, CreateCount, DeleteCalls, Pods, Resolved, VolumeUpdates) are hooks
// for tests.
package mock
