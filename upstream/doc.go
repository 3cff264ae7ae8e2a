// Package upstream runs providers written for upstream virtual-kubelet
// (github.com/virtual-kubelet/virtual-kubelet, the nodeutil and node packages) on
// vkubelet unchanged: it adapts such a provider to vkubelet's contract in package
// provider.
//
// New takes what a provider hands nodeutil.NewNode, its nodeutil.NewProviderFunc;
// Wrap takes an already built pair of nodeutil.Provider and node.NodeProvider;
// WrapController takes what a main that does without nodeutil hands upstream's
// node package (a pod handler, a NodeProvider, its Node and the routes it
// attaches, as interLink's virtual kubelet does). Each returns a
// provider.PodLifecycleHandler that also implements the optional interfaces the
// upstream provider can serve: PodNotifier (when it is a node.PodNotifier),
// NodeProvider, NodeConfigurer, ResolvedPodHandler, logs, exec, attach,
// port-forward, stats summary and resource metrics.
//
// What the adapter does for an upstream provider:
//   - pods reach CreatePod and UpdatePod with their environment resolved into
//     each container's env (envFrom emptied), from vkubelet's resolution, and
//     UpdatePod with a status (the provider's own if the pod came without one);
//   - the listers of nodeutil.ProviderConfig are served: the node's pods and the
//     Services from informers started on first use, and each ConfigMap and Secret
//     that a pod handed to the provider references from a watch of that object
//     alone, as the Node authorizer lets a node read them;
//   - logs, exec and attach of a pod or container the provider's GetPod does not
//     show are NotFound before the provider is asked (a provider whose GetPod
//     fails otherwise is asked);
//   - a provider that notifies its pods' statuses and cannot read them back
//     (GetPod and GetPodStatus fail) is answered for by its last notification
//     if asked (Config.StatusFromNotifications), as upstream's pod controller
//     took notifications as the statuses;
//   - errors of upstream's classes (errdefs.NotFound, InvalidInput, and a pod
//     returned nil) become vkubelet's, and an exec's exit status an
//     *provider.ExecError.
//
// It is a library for a provider's own main; vkubelet's node binary does not
// link it.
package upstream
