// Package identity is the node's identity towards the cluster, in one package:
// its client certificate, its kubelet-serving certificate, and the approval of
// the certificate signing requests of an install's nodes.
//
// The client certificate (StartClient) is the kubelet's TLS bootstrap: a
// certificate for `system:node:<name>` in the group `system:nodes`, which the API
// server's Node authorizer and NodeRestriction admission plugin recognise and
// confine to the node's own objects and the objects its pods reference. The
// first certificate is asked for with a bootstrap credential (a bootstrap token,
// typically, allowed to create CSRs for the
// kubernetes.io/kube-apiserver-client-kubelet signer); later ones are asked for
// with the current certificate, before it expires. client-go's certificate
// manager does the asking and keeps the pair in a directory, so a restart reuses
// it; client-go's transport re-reads the pair from that file, so connections move
// to a renewed certificate without a restart.
//
// The serving certificate (ServingCertificate) is the kubelet API's: from files,
// from the cluster through a CSR with the kubernetes.io/kubelet-serving signer
// (renewed before it expires, as the kubelet's own serving certificate is), or
// self-signed when explicitly asked for. A kubelet-serving CSR must be approved
// by a cluster admin or the approver. For development clusters, AutoApprove
// makes the node approve its own CSRs — the very objects it created, with its
// key, as its identity, for exactly its own name and addresses; never anyone
// else's — which needs the right to approve CSRs for that signer.
//
// The approver (Approver, `vkubelet approve-csrs`; `vkubeletctl up` runs it in
// process) approves the CSRs of the nodes one vkubelet install owns, and nothing
// else: a node's client identity and its kubelet serving certificate. Why it
// exists: the kubelet's usual TLS bootstrap gives the bootstrap credential the
// certificatesigningrequests/nodeclient right, with which
// kube-controller-manager approves a client certificate for *any* node name that
// credential asks for. A stolen vkubelet token could then become every node of
// the cluster. With the approver the bootstrap credential may create CSRs and
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
// The Approver watches CSRs and carries decisions out.
//
// Which node CSR to approve is one decision, Policy.Decide, a pure function of
// the request with one CSR parser (the request's signature must verify against
// its own key), asked by the approver (ByApprover) and by a node approving its
// own serving CSR (ByNode): the rules are the same for both but for what
// depends on who asks (Asker).
//
// It is internal: internal/process/agent (the node's certificates),
// internal/process/nodecmd (approve-csrs) and the lab (vkubeletctl up, the
// tests' control plane) use it. It knows nothing of pods or providers.
package identity
