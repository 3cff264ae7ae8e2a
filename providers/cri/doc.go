// Package cri is a provider that runs pods as real containers on a container runtime
// that speaks the CRI (containerd in our tests), over its gRPC socket. It is the
// reference implementation of the provider contract: it implements every interface
// of package provider, and knows nothing of the controllers.
//
// # Pods
//
// Each pod has one goroutine (see sync.go) that makes the runtime match the pod, level
// based, every Config.SyncInterval or when woken: a sandbox (its own network
// namespace from the runtime's CNI configuration, or the host's; sandbox.go), then
// the init containers one at a time in order, then the app containers
// (containers.go); images pulled according to the pull policy, with the pod's pull
// credentials; crashed containers restarted according to restartPolicy after a
// back-off (Config.BackoffBase doubling to Config.BackoffMax; backoff.go), or all
// of them when a restartPolicyRules says RestartAllContainers (restartall.go);
// resizes in place (resize.go), or by a restart where the resizePolicy asks
// (resizerestart.go); liveness,
// readiness and startup probes; postStart and preStop hooks (hooks.go); ephemeral containers (kubectl debug) started once
// each, in the process namespace of their target container if they name one
// (ephemeral.go); and the pod's status computed from what the runtime reports
// (status.go) and pushed to the NotifyPods callback when it changes.
//
// Where the runtime leaves it to the kubelet, the provider does what the kubelet
// does: the sandbox's DNS configuration from the pod's dnsPolicy (dns.go), the
// pod's /etc/hosts (hosts.go), and the containers' termination messages
// (termination.go). docs/CRI.md describes them and the Config.
//
// Volumes live under Config.RootDir/pods/<uid>/volumes: emptyDirs (a tmpfs for medium
// Memory), and the files of configMap, secret, downwardAPI and projected volumes from
// the resolved pod, written the kubelet's way (a ..data symlink swapped atomically)
// so UpdatePodVolumes changes them under running containers. hostPath volumes are
// bind-mounted as they are.
//
// DeletePod returns at once; the pod's goroutine stops the containers with the grace
// period, then stops and removes the sandbox and the pod's files, and the pod is gone
// (GetPod answers NotFound).
//
// # Restarts
//
// Sandboxes carry labels naming the node and the pod; the pod as accepted is kept in
// pods/<uid>/pod.json. New lists the sandboxes of its node and takes their pods over
// (adopt.go), so a restarted process finds its pods, duplicates nothing (CreatePod of
// a known UID is a no-op) and leaves nothing orphaned (a sandbox without pod.json is
// removed).
// It reads each pod from the runtime before it returns, so that a pod running before
// the restart is reported running from the start, not as a pod just accepted.
//
// # Streams, logs and stats
//
// Exec, attach and port-forward ask the runtime for a streaming URL and connect to it
// with client-go's SPDY clients. Logs are read from the CRI log files. Stats come
// from ListContainerStats, the node's from /proc.
package cri
