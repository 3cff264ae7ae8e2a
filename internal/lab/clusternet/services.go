package clusternet

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/lab/controlplane"
)

// dnsUser is CoreDNS's identity; dnsRole gives it what its kubernetes plugin
// reads, and nothing else.
const (
	dnsUser = "vkubelet:clusternet:coredns"
	dnsRole = "vkubelet:clusternet:coredns"
	// managedBy marks the EndpointSlices this package writes, so that the
	// EndpointSlice controllers leave them alone.
	managedBy = "clusternet.vkubelet.io"
)

// publishServices writes what a real cluster's API server and DNS add-on would:
// the `kubernetes` Service's endpoint (the API server's own reconciler is off, as
// it advertises a loopback address), the kube-dns Service and its endpoint, and
// CoreDNS's RBAC. Each is created or brought back to this content, so nodes
// sharing a control plane agree.
func publishServices(ctx context.Context, cp *controlplane.ControlPlane, apiPort int) error {
	c, err := cp.Client()
	if err != nil {
		return err
	}
	dns := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Namespace: metav1.NamespaceSystem,
			Labels: map[string]string{"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS"}},
		Spec: corev1.ServiceSpec{
			ClusterIP: DNSServiceIP,
			Ports: []corev1.ServicePort{
				{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(53)},
				{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(53)},
			},
		},
	}
	// Looked up first: creating it again fails on its address, not its name.
	if _, err := c.CoreV1().Services(dns.Namespace).Get(ctx, dns.Name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		_, err = c.CoreV1().Services(dns.Namespace).Create(ctx, dns, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating Service kube-system/kube-dns: %w", err)
		}
	} else if err != nil {
		return fmt.Errorf("reading Service kube-system/kube-dns: %w", err)
	}
	slices := []*discoveryv1.EndpointSlice{
		endpointSlice(metav1.NamespaceDefault, "kubernetes", apiServerAddress,
			discoveryv1.EndpointPort{Name: ptr.To("https"), Port: ptr.To(int32(apiPort)), Protocol: ptr.To(corev1.ProtocolTCP)}),
		endpointSlice(metav1.NamespaceSystem, "kube-dns", dnsAddress,
			discoveryv1.EndpointPort{Name: ptr.To("dns"), Port: ptr.To(int32(53)), Protocol: ptr.To(corev1.ProtocolUDP)},
			discoveryv1.EndpointPort{Name: ptr.To("dns-tcp"), Port: ptr.To(int32(53)), Protocol: ptr.To(corev1.ProtocolTCP)}),
	}
	for _, s := range slices {
		if err := apply(ctx, c, s); err != nil {
			return err
		}
	}
	return applyDNSRBAC(ctx, c)
}

// endpointSlice is the slice of service with one ready endpoint at ip.
func endpointSlice(namespace, service, ip string, ports ...discoveryv1.EndpointPort) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: service + "-clusternet", Namespace: namespace,
			Labels: map[string]string{
				discoveryv1.LabelServiceName: service,
				discoveryv1.LabelManagedBy:   managedBy,
			},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{ip},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
		}},
		Ports: ports,
	}
}

// apply creates s or overwrites its endpoints and ports.
func apply(ctx context.Context, c kubernetes.Interface, s *discoveryv1.EndpointSlice) error {
	api := c.DiscoveryV1().EndpointSlices(s.Namespace)
	_, err := api.Create(ctx, s, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		var old *discoveryv1.EndpointSlice
		if old, err = api.Get(ctx, s.Name, metav1.GetOptions{}); err == nil {
			old.Labels, old.Endpoints, old.Ports = s.Labels, s.Endpoints, s.Ports
			_, err = api.Update(ctx, old, metav1.UpdateOptions{})
		}
	}
	if err != nil {
		return fmt.Errorf("writing EndpointSlice %s/%s: %w", s.Namespace, s.Name, err)
	}
	return nil
}

// applyDNSRBAC lets dnsUser list and watch what CoreDNS's kubernetes plugin
// serves names from: Services, their EndpointSlices, and Namespaces.
func applyDNSRBAC(ctx context.Context, c kubernetes.Interface) error {
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: dnsRole},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"services", "namespaces"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
		},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: dnsRole},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: dnsRole},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: dnsUser}},
	}
	if _, err := c.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ClusterRole %s: %w", dnsRole, err)
	}
	if _, err := c.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ClusterRoleBinding %s: %w", dnsRole, err)
	}
	return nil
}
