// Package csrapprover approves the certificate signing requests of the nodes one
// vkubelet install owns, and nothing else: a node's client identity
// (system:node:<name>, signer kubernetes.io/kube-apiserver-client-kubelet) and its
// kubelet serving certificate (kubernetes.io/kubelet-serving).
//
// Why it exists: the kubelet's usual TLS bootstrap gives the bootstrap credential
// the certificatesigningrequests/nodeclient right, with which
// kube-controller-manager approves a client certificate for *any* node name that
// credential asks for. A stolen vkubelet token could then become every node of
// the cluster. With this approver the bootstrap credential may create CSRs and
// nothing more; the approver, under an account of its own, approves a request
// only when
//
//   - it comes from one of the install's requesters (its bootstrap account), or
//     from a node the install owns renewing its own certificate;
//   - it asks for a node name the install owns (Names);
//   - its signer, subject, key usages and subject alternative names are exactly
//     what that signer's certificates for a node carry, and a serving
//     certificate's addresses are the node's (ServingIPs);
//
// and denies, with the reason in the CSR's condition and an Event, a request of
// its requesters that asks for anything else. Requests of anyone else (the
// cluster's real kubelets, other tools) are left alone for their own approvers.
//
// The decision (Policy.Decide) is a pure function of the request; the
// Controller watches CSRs and carries decisions out. `vkubelet approve-csrs` runs
// it; `vkubeletctl up` runs it in process. It knows nothing of pods or providers.
package csrapprover
