// Package podwire is the pod's wire form as the node keeps and reads it: pods
// listed and watched as the API server's protobuf bytes, cached packed, and
// read a field or two at a time without decoding the whole pod.
//
// A node agent holds every pod of its node for the pod's life and hears of
// every change to each through one watch; at 10,000s of pods per node,
// client-go's way (each event decoded into a corev1.Pod, kept decoded) costs
// about 4 KiB of heap per pod and a decode and an encode per event, a tenth of
// the node's CPU under load. Here each pod is decoded only as far as the
// informer's bookkeeping needs (its metadata), kept as its encoding compressed
// (Pod: a few hundred bytes), fingerprinted so that an update that changed
// nothing a handler reads is told without decoding, and decoded whole, or in
// part (its status, its containers' names or resources), when a handler needs
// it.
//
// It is the pod controller's (pod/) and its informer's: Client lists, watches
// and writes statuses, TransformOf turns what the informer receives into Pods.
// It knows nothing of providers or of the controller's state. The field
// numbers it reads are in fields.go, checked against k8s.io/api's Go types.
package podwire
