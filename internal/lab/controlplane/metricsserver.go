package controlplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
)

// The names metrics-server goes by in the cluster, as in its upstream manifests.
const (
	metricsServerUser      = "system:metrics-server"
	metricsServerNamespace = "kube-system"
	metricsServerService   = "metrics-server"
	metricsAPIService      = "v1beta1.metrics.k8s.io"
)

var apiServiceResource = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// MetricsServerConfig says how to run metrics-server.
type MetricsServerConfig struct {
	// Address is the IP metrics-server listens on. The API server refuses to
	// proxy to loopback addresses, so it must be another address of this machine
	// (vkubeletctl up uses the host's end of the node's veth pair).
	Address string
	// Resolution is how often metrics-server scrapes every node's
	// /metrics/resource; at least 10s. Zero: 15s.
	Resolution time.Duration
}

// StartMetricsServer builds (first time) and starts metrics-server, which serves
// metrics.k8s.io (`kubectl top`) from the kubelet APIs of the cluster's nodes, and
// registers it with the API server: its RBAC, a selector-less Service in
// kube-system with an EndpointSlice pointing at cfg.Address, and the APIService
// v1beta1.metrics.k8s.io. It returns once metrics-server answers /livez; the API
// is served a little later, see WaitMetricsAPI. Stop stops it with the rest.
//
// metrics-server authenticates to the API server and to kubelets with a client
// certificate of the cluster CA (user system:metrics-server) and verifies the
// kubelets' serving certificates against the cluster CA, so nodes must serve one
// issued by the cluster (vkubelet's default, a kubelet-serving CSR).
func (cp *ControlPlane) StartMetricsServer(ctx context.Context, cfg MetricsServerConfig) error {
	ip := net.ParseIP(cfg.Address)
	if ip == nil || ip.IsLoopback() {
		return fmt.Errorf("metrics-server address %q: need a non-loopback IP the API server can reach", cfg.Address)
	}
	if cfg.Resolution == 0 {
		cfg.Resolution = 15 * time.Second
	}
	bin, err := EnsureMetricsServer(ctx, cp.cfg.Out)
	if err != nil {
		return err
	}
	clientCert, clientKey, err := cp.PKI.issueClient("metrics-server-client", metricsServerUser)
	if err != nil {
		return err
	}
	kc, err := cp.writeKubeconfig("metrics-server.kubeconfig", clientCert, clientKey)
	if err != nil {
		return err
	}
	// The aggregator checks the name <service>.<namespace>.svc, whatever address
	// it dials; the IP lets the /livez probe below verify the certificate too.
	svcName := metricsServerService + "." + metricsServerNamespace + ".svc"
	servingCert, servingKey, err := cp.PKI.issueServing("metrics-server", []net.IP{ip}, []string{svcName, svcName + ".cluster.local"})
	if err != nil {
		return err
	}
	port, err := freePort(cfg.Address)
	if err != nil {
		return err
	}
	if err := cp.registerMetricsServer(ctx, cfg.Address, port); err != nil {
		return fmt.Errorf("registering metrics-server: %w", err)
	}
	p, err := startProcess(cp.Dir, "metrics-server", bin,
		"--kubeconfig="+kc,
		"--authentication-kubeconfig="+kc,
		"--authorization-kubeconfig="+kc,
		"--bind-address="+cfg.Address,
		"--secure-port="+strconv.Itoa(port),
		"--tls-cert-file="+servingCert,
		"--tls-private-key-file="+servingKey,
		"--kubelet-certificate-authority="+cp.PKI.CACert,
		"--kubelet-preferred-address-types=InternalIP",
		"--kubelet-use-node-status-port",
		"--metric-resolution="+cfg.Resolution.String(),
	)
	if err != nil {
		return err
	}
	client, err := httpsClient(cp.PKI.CACert)
	if err != nil {
		_ = p.stop(5 * time.Second)
		return err
	}
	if err := waitHTTP(ctx, p, "https://"+net.JoinHostPort(cfg.Address, strconv.Itoa(port))+"/livez", client, time.Minute); err != nil {
		_ = p.stop(5 * time.Second)
		return err
	}
	cp.processes = append(cp.processes, p)
	fmt.Fprintf(cp.cfg.Out, "controlplane: metrics-server %s listening on %s:%d (log: %s)\n", MetricsServerVersion, cfg.Address, port, p.Log)
	return nil
}

// registerMetricsServer creates what upstream's manifests create for
// metrics-server, except its Deployment: the same permissions for its user, and
// a Service whose only endpoint is address:port.
func (cp *ControlPlane) registerMetricsServer(ctx context.Context, address string, port int) error {
	c, err := cp.Client()
	if err != nil {
		return err
	}
	user := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: metricsServerUser}}
	create := []func() error{
		// What it reads to scrape kubelets and to label metrics.
		func() error {
			_, err := c.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
				ObjectMeta: metav1.ObjectMeta{Name: metricsServerUser},
				Rules: []rbacv1.PolicyRule{
					{APIGroups: []string{""}, Resources: []string{"nodes/metrics"}, Verbs: []string{"get"}},
					{APIGroups: []string{""}, Resources: []string{"pods", "nodes"}, Verbs: []string{"get", "list", "watch"}},
				},
			}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := c.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: metricsServerUser},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: metricsServerUser},
				Subjects:   user,
			}, metav1.CreateOptions{})
			return err
		},
		// Reading metrics.k8s.io is part of the built-in view, edit and admin roles.
		func() error {
			_, err := c.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
				ObjectMeta: metav1.ObjectMeta{Name: "system:aggregated-metrics-reader", Labels: map[string]string{
					"rbac.authorization.k8s.io/aggregate-to-view":  "true",
					"rbac.authorization.k8s.io/aggregate-to-edit":  "true",
					"rbac.authorization.k8s.io/aggregate-to-admin": "true",
				}},
				Rules: []rbacv1.PolicyRule{{APIGroups: []string{"metrics.k8s.io"}, Resources: []string{"pods", "nodes"}, Verbs: []string{"get", "list", "watch"}}},
			}, metav1.CreateOptions{})
			return err
		},
		// As an aggregated API server it checks its callers with TokenReviews and
		// SubjectAccessReviews...
		func() error {
			_, err := c.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: "metrics-server:system:auth-delegator"},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:auth-delegator"},
				Subjects:   user,
			}, metav1.CreateOptions{})
			return err
		},
		// ...and reads the client and front-proxy CAs from
		// kube-system/extension-apiserver-authentication.
		func() error {
			_, err := c.RbacV1().RoleBindings(metricsServerNamespace).Create(ctx, &rbacv1.RoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: "metrics-server-auth-reader"},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "extension-apiserver-authentication-reader"},
				Subjects:   user,
			}, metav1.CreateOptions{})
			return err
		},
		// No selector: nothing manages its endpoints but us. With
		// --enable-aggregator-routing the API server dials the endpoint itself.
		func() error {
			_, err := c.CoreV1().Services(metricsServerNamespace).Create(ctx, &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Name: metricsServerService},
				Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{
					Name: "https", Port: 443, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(int32(port)),
				}}},
			}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := c.DiscoveryV1().EndpointSlices(metricsServerNamespace).Create(ctx, &discoveryv1.EndpointSlice{
				ObjectMeta: metav1.ObjectMeta{Name: metricsServerService, Labels: map[string]string{
					discoveryv1.LabelServiceName: metricsServerService,
					discoveryv1.LabelManagedBy:   "vkubelet",
				}},
				AddressType: discoveryv1.AddressTypeIPv4,
				Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{address}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
				Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(int32(port)), Protocol: ptr.To(corev1.ProtocolTCP)}},
			}, metav1.CreateOptions{})
			return err
		},
		func() error { return cp.createMetricsAPIService(ctx) },
	}
	for _, f := range create {
		if err := f(); err != nil {
			return err
		}
	}
	return nil
}

// createMetricsAPIService registers metrics.k8s.io/v1beta1, served by the Service
// with a certificate of the cluster CA. The dynamic client spares us
// kube-aggregator's clientset for one object.
func (cp *ControlPlane) createMetricsAPIService(ctx context.Context) error {
	dc, err := dynamic.NewForConfig(cp.RESTConfig)
	if err != nil {
		return err
	}
	ca, err := os.ReadFile(cp.PKI.CACert)
	if err != nil {
		return err
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1",
		"kind":       "APIService",
		"metadata":   map[string]any{"name": metricsAPIService},
		"spec": map[string]any{
			"group":                "metrics.k8s.io",
			"version":              "v1beta1",
			"groupPriorityMinimum": int64(100),
			"versionPriority":      int64(100),
			"caBundle":             base64.StdEncoding.EncodeToString(ca),
			"service": map[string]any{
				"namespace": metricsServerNamespace,
				"name":      metricsServerService,
				"port":      int64(443),
			},
		},
	}}
	_, err = dc.Resource(apiServiceResource).Create(ctx, obj, metav1.CreateOptions{})
	return err
}

// WaitMetricsAPI waits until the API server reports the APIService of
// metrics.k8s.io Available, that is, it reaches metrics-server. `kubectl top`
// shows a pod once metrics-server has scraped it twice after that.
func (cp *ControlPlane) WaitMetricsAPI(ctx context.Context) error {
	dc, err := dynamic.NewForConfig(cp.RESTConfig)
	if err != nil {
		return err
	}
	var last string
	for {
		obj, err := dc.Resource(apiServiceResource).Get(ctx, metricsAPIService, metav1.GetOptions{})
		if err == nil {
			conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
			for _, c := range conds {
				m, _ := c.(map[string]any)
				if m["type"] == "Available" {
					if m["status"] == "True" {
						return nil
					}
					last = fmt.Sprintf("Available=%v: %v", m["status"], m["message"])
				}
			}
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("APIService %s not available (%s): %w", metricsAPIService, last, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// httpsClient trusts only the CA in caFile.
func httpsClient(caFile string) (*http.Client, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, errors.New("no certificate in " + caFile)
	}
	return &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}},
	}, nil
}
