package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

const (
	// ServiceCIDR is the ClusterIP range; serviceClusterIP is the `kubernetes` Service.
	ServiceCIDR      = "10.0.0.0/24"
	serviceClusterIP = "10.0.0.1"
	// serviceAccountIssuer is the iss claim of service-account tokens.
	serviceAccountIssuer = "https://kubernetes.default.svc.cluster.local"
)

// Config says what to start.
type Config struct {
	// KubernetesVersion is the release to run, one of KubernetesVersions. Empty:
	// SelectedKubernetesVersion ($VKUBELET_KUBERNETES_VERSION, else KubernetesVersion).
	KubernetesVersion string
	// Dir holds PKI, kubeconfigs, etcd data and logs. Empty: a new temporary directory,
	// removed by Stop.
	Dir string
	// Scheduler and ControllerManager start those components. Without the
	// controller-manager there is no `default` ServiceAccount and nothing removes the
	// not-ready taint from new nodes, so the ServiceAccount and TaintNodesByCondition
	// admission plugins are then switched off.
	Scheduler         bool
	ControllerManager bool
	// ServiceAccountAdmission keeps the ServiceAccount admission plugin on without
	// the controller-manager, so that pods get the `kube-api-access-*` token volume
	// as in any real cluster. The caller must then create, in each namespace it
	// puts pods in, what the controller-manager would: the `default` ServiceAccount
	// (the plugin refuses pods without it) and the `kube-root-ca.crt` ConfigMap
	// (the token volume projects it). It changes nothing when the controller-manager
	// runs, which keeps the plugin on anyway.
	ServiceAccountAdmission bool
	// NodeMonitorGracePeriod is how long a node's lease may go unrenewed before the
	// node-lifecycle controller marks it NotReady (kube-controller-manager's default
	// is 40s). Zero keeps the default.
	NodeMonitorGracePeriod time.Duration
	// ExtraAPIServerArgs are appended to kube-apiserver's command line.
	ExtraAPIServerArgs []string
	// Out receives progress (building, reusing binaries, startup time). Nil: silent.
	Out io.Writer
	// StartTimeout bounds the wait for /readyz. Zero: 2 minutes.
	StartTimeout time.Duration
}

// ControlPlane is a running control plane.
type ControlPlane struct {
	Dir            string
	PKI            *PKI
	Binaries       *Binaries
	KubeconfigPath string       // admin kubeconfig
	URL            string       // https://127.0.0.1:<port>
	RESTConfig     *rest.Config // admin credentials
	EtcdURL        string

	ownsDir bool
	apiPort int
	// etcd's ports, kept so that StartEtcd brings it back where the API server
	// looks for it.
	etcdClientPort, etcdPeerPort int
	cfg                          Config
	processes                    []*process // in start order; stopped in reverse
}

// Start builds or reuses the binaries and starts the control plane, returning once
// kube-apiserver answers /readyz. On failure everything started is stopped and the
// error includes the tail of the failing component's log.
func Start(ctx context.Context, cfg Config) (*ControlPlane, error) {
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 2 * time.Minute
	}
	if cfg.KubernetesVersion == "" {
		cfg.KubernetesVersion = SelectedKubernetesVersion()
	}
	bins, err := EnsureKubernetes(ctx, cfg.KubernetesVersion, cfg.Out)
	if err != nil {
		return nil, err
	}
	cp := &ControlPlane{Binaries: bins, cfg: cfg, Dir: cfg.Dir}
	if cp.Dir == "" {
		cp.Dir, err = os.MkdirTemp("", "vkubelet-controlplane-")
		if err != nil {
			return nil, err
		}
		cp.ownsDir = true
	}
	if cp.Dir, err = filepath.Abs(cp.Dir); err != nil {
		return nil, err
	}
	started := time.Now()
	if err := cp.start(ctx); err != nil {
		_ = cp.Stop()
		return nil, err
	}
	fmt.Fprintf(cfg.Out, "controlplane: kube-apiserver ready at %s in %s (state in %s)\n",
		cp.URL, time.Since(started).Round(time.Millisecond), cp.Dir)
	return cp, nil
}

func (cp *ControlPlane) start(ctx context.Context) error {
	var err error
	if cp.PKI, err = generatePKI(filepath.Join(cp.Dir, "pki")); err != nil {
		return fmt.Errorf("generating PKI: %w", err)
	}
	if err := cp.startEtcd(ctx); err != nil {
		return err
	}
	if err := cp.startAPIServer(ctx); err != nil {
		return err
	}
	if cp.cfg.Scheduler {
		kc, err := cp.writeKubeconfig("scheduler.kubeconfig", cp.PKI.SchedulerCert, cp.PKI.SchedulerKey)
		if err != nil {
			return err
		}
		p, err := startProcess(cp.Dir, "kube-scheduler", cp.Binaries.Scheduler,
			"--kubeconfig="+kc,
			"--authentication-kubeconfig="+kc,
			"--authorization-kubeconfig="+kc,
			"--leader-elect=false",
			"--bind-address=127.0.0.1",
			"--secure-port="+strconv.Itoa(mustFreePort()),
		)
		if err != nil {
			return err
		}
		cp.processes = append(cp.processes, p)
	}
	if cp.cfg.ControllerManager {
		kc, err := cp.writeKubeconfig("controller-manager.kubeconfig", cp.PKI.ControllerManagerCert, cp.PKI.ControllerManagerKey)
		if err != nil {
			return err
		}
		args := []string{
			"--kubeconfig=" + kc,
			"--authentication-kubeconfig=" + kc,
			"--authorization-kubeconfig=" + kc,
			"--leader-elect=false",
			"--bind-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(mustFreePort()),
			"--use-service-account-credentials=true",
			"--service-account-private-key-file=" + cp.PKI.ServiceAccountKey,
			"--root-ca-file=" + cp.PKI.CACert,
			// Lets the CSR signer issue kubelet-serving certificates from our CA.
			"--cluster-signing-cert-file=" + cp.PKI.CACert,
			"--cluster-signing-key-file=" + cp.PKI.CAKey,
			"--allocate-node-cidrs=false",
			"--node-monitor-period=1s",
		}
		if g := cp.cfg.NodeMonitorGracePeriod; g > 0 {
			args = append(args, "--node-monitor-grace-period="+g.String())
		}
		p, err := startProcess(cp.Dir, "kube-controller-manager", cp.Binaries.ControllerManager, args...)
		if err != nil {
			return err
		}
		cp.processes = append(cp.processes, p)
	}
	// A component that dies at once (bad flag, port taken) should fail Start, not the
	// first test that needs it.
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(300 * time.Millisecond):
	}
	for _, p := range cp.processes {
		if !p.running() {
			return p.failure()
		}
	}
	return nil
}

func (cp *ControlPlane) startEtcd(ctx context.Context) error {
	// A port found free may be taken before etcd binds it; try again with new ones.
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		if lastErr = cp.runEtcd(ctx, mustFreePort(), mustFreePort()); lastErr == nil {
			return nil
		}
	}
	return fmt.Errorf("starting etcd: %w", lastErr)
}

// StopEtcd stops etcd alone, for tests of a cluster whose storage goes away;
// StartEtcd brings it back on the same ports with the same data.
func (cp *ControlPlane) StopEtcd() error { return cp.stopComponent("etcd") }

// StartEtcd restarts etcd after StopEtcd, on the same ports.
func (cp *ControlPlane) StartEtcd(ctx context.Context) error {
	if cp.started("etcd") {
		return errors.New("etcd is already running")
	}
	return cp.runEtcd(ctx, cp.etcdClientPort, cp.etcdPeerPort)
}

// runEtcd starts etcd on the given ports and waits for it to be healthy.
func (cp *ControlPlane) runEtcd(ctx context.Context, client, peer int) error {
	clientURL := "http://127.0.0.1:" + strconv.Itoa(client)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peer)
	p, err := startProcess(cp.Dir, "etcd", cp.Binaries.Etcd,
		"--name=vkubelet",
		"--data-dir="+filepath.Join(cp.Dir, "etcd"),
		"--listen-client-urls="+clientURL,
		"--advertise-client-urls="+clientURL,
		"--listen-peer-urls="+peerURL,
		"--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=vkubelet="+peerURL,
		// Durability does not matter for a throw-away cluster; fsync dominates its
		// write latency on a busy disk.
		"--unsafe-no-fsync",
		// etcd's default 2 GiB quota is near what a 100,000-pod benchmark writes
		// between two of the API server's compactions (every 5 minutes); past it
		// etcd refuses every write until defragmented.
		"--quota-backend-bytes="+strconv.Itoa(8<<30),
		"--log-level=warn",
	)
	if err != nil {
		return err
	}
	if err := waitHTTP(ctx, p, clientURL+"/health", nil, 30*time.Second); err != nil {
		_ = p.stop(5 * time.Second)
		return err
	}
	cp.processes = append(cp.processes, p)
	cp.EtcdURL, cp.etcdClientPort, cp.etcdPeerPort = clientURL, client, peer
	return nil
}

func (cp *ControlPlane) startAPIServer(ctx context.Context) error {
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		cp.apiPort = mustFreePort()
		cp.URL = "https://127.0.0.1:" + strconv.Itoa(cp.apiPort)
		var err error
		if cp.KubeconfigPath, err = cp.writeKubeconfig("admin.kubeconfig", cp.PKI.AdminCert, cp.PKI.AdminKey); err != nil {
			return err
		}
		if cp.RESTConfig, err = clientcmd.BuildConfigFromFlags("", cp.KubeconfigPath); err != nil {
			return err
		}
		if lastErr = cp.runAPIServer(ctx); lastErr == nil {
			return nil
		}
	}
	return lastErr
}

// runAPIServer starts kube-apiserver on cp.apiPort and waits for /readyz.
func (cp *ControlPlane) runAPIServer(ctx context.Context) error {
	args := []string{
		"--etcd-servers=" + cp.EtcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(cp.apiPort),
		// With a loopback advertise address a 1.37 apiserver exits unless the
		// endpoint reconciler is off; nothing routes to the Service anyway.
		"--endpoint-reconciler-type=none",
		"--tls-cert-file=" + cp.PKI.APIServerCert,
		"--tls-private-key-file=" + cp.PKI.APIServerKey,
		"--client-ca-file=" + cp.PKI.CACert,
		"--service-account-issuer=" + serviceAccountIssuer,
		"--service-account-key-file=" + cp.PKI.ServiceAccountPub,
		"--service-account-signing-key-file=" + cp.PKI.ServiceAccountKey,
		"--service-cluster-ip-range=" + ServiceCIDR,
		// Nodes are confined as in a production cluster: the Node authorizer and
		// the NodeRestriction admission plugin, and bootstrap tokens for their
		// TLS bootstrap (see NodeBootstrapKubeconfig).
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--enable-bootstrap-token-auth=true",
		// How the apiserver reaches node kubelet APIs (logs, exec, port-forward): it
		// authenticates with this client certificate and checks the kubelet's serving
		// certificate against the cluster CA.
		"--kubelet-client-certificate=" + cp.PKI.KubeletClientCert,
		"--kubelet-client-key=" + cp.PKI.KubeletClientKey,
		"--kubelet-certificate-authority=" + cp.PKI.CACert,
		"--kubelet-preferred-address-types=InternalIP",
		// The aggregation layer (metrics.k8s.io from metrics-server, see
		// StartMetricsServer): the API server proxies with the front-proxy client
		// certificate, passing the caller in request headers, and dials the
		// Service's endpoint itself, as there is no kube-proxy for its ClusterIP.
		"--requestheader-client-ca-file=" + cp.PKI.FrontProxyCACert,
		"--requestheader-allowed-names=" + frontProxyClientName,
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + cp.PKI.FrontProxyClientCert,
		"--proxy-client-key-file=" + cp.PKI.FrontProxyClientKey,
		"--enable-aggregator-routing=true",
		"--allow-privileged=true",
		"--profiling=false",
	}
	if !cp.cfg.ControllerManager {
		args = append(args, "--disable-admission-plugins="+strings.Join(disabledAdmission(cp.cfg), ","))
	}
	args = append(args, cp.cfg.ExtraAPIServerArgs...)
	p, err := startProcess(cp.Dir, "kube-apiserver", cp.Binaries.APIServer, args...)
	if err != nil {
		return err
	}
	client, err := rest.HTTPClientFor(cp.RESTConfig)
	if err != nil {
		_ = p.stop(5 * time.Second)
		return err
	}
	if err := waitHTTP(ctx, p, cp.URL+"/readyz", client, cp.cfg.StartTimeout); err != nil {
		_ = p.stop(5 * time.Second)
		return err
	}
	cp.processes = append(cp.processes, p)
	return nil
}

// disabledAdmission lists the admission plugins switched off for a control plane
// without the controller-manager: the ones that would wait on it.
func disabledAdmission(cfg Config) []string {
	off := []string{"TaintNodesByCondition"}
	if !cfg.ServiceAccountAdmission {
		off = append([]string{"ServiceAccount"}, off...)
	}
	return off
}

// waitHTTP polls url until it answers 200, the process exits or the timeout passes.
func waitHTTP(ctx context.Context, p *process, url string, client *http.Client, timeout time.Duration) error {
	if client == nil {
		client = http.DefaultClient
	}
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		if !p.running() {
			return p.failure()
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("HTTP %d: %s", resp.StatusCode, body)
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s not ready after %s (last answer: %s); last lines of %s:\n%s",
		p.Name, timeout, last, p.Log, p.Tail(25))
}

// writeKubeconfig writes a kubeconfig for the given client certificate.
func (cp *ControlPlane) writeKubeconfig(name, cert, key string) (string, error) {
	path := filepath.Join(cp.Dir, name)
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["vkubelet"] = &clientcmdapi.Cluster{Server: cp.URL, CertificateAuthority: cp.PKI.CACert}
	cfg.AuthInfos["vkubelet"] = &clientcmdapi.AuthInfo{ClientCertificate: cert, ClientKey: key}
	cfg.Contexts["vkubelet"] = &clientcmdapi.Context{Cluster: "vkubelet", AuthInfo: "vkubelet"}
	cfg.CurrentContext = "vkubelet"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", fmt.Errorf("writing %s: %w", path, err)
	}
	return path, nil
}

// Client returns an admin clientset.
func (cp *ControlPlane) Client() (kubernetes.Interface, error) {
	return kubernetes.NewForConfig(cp.RESTConfig)
}

// PIDs returns the process IDs of the running components, by name.
func (cp *ControlPlane) PIDs() map[string]int {
	out := map[string]int{}
	for _, p := range cp.processes {
		if p.running() {
			out[p.Name] = p.Cmd.Process.Pid
		}
	}
	return out
}

// StopAPIServer stops kube-apiserver alone, for tests of a cluster that goes away;
// StartAPIServer brings it back on the same port with the same state.
func (cp *ControlPlane) StopAPIServer() error { return cp.stopComponent("kube-apiserver") }

// StartAPIServer restarts kube-apiserver after StopAPIServer, on the same port.
func (cp *ControlPlane) StartAPIServer(ctx context.Context) error {
	if cp.started("kube-apiserver") {
		return errors.New("kube-apiserver is already running")
	}
	return cp.runAPIServer(ctx)
}

// stopComponent stops the component called name alone.
func (cp *ControlPlane) stopComponent(name string) error {
	for i, p := range cp.processes {
		if p.Name == name {
			cp.processes = append(cp.processes[:i:i], cp.processes[i+1:]...)
			return p.stop(10 * time.Second)
		}
	}
	return fmt.Errorf("%s is not running", name)
}

// started reports whether the component called name was started and not stopped.
func (cp *ControlPlane) started(name string) bool {
	for _, p := range cp.processes {
		if p.Name == name {
			return true
		}
	}
	return false
}

// Stop stops every component, newest first, and removes the state directory if
// Start created it. It is safe to call more than once.
func (cp *ControlPlane) Stop() error {
	var errs []error
	for i := len(cp.processes) - 1; i >= 0; i-- {
		if err := cp.processes[i].stop(10 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	if cp.ownsDir && cp.Dir != "" {
		if err := os.RemoveAll(cp.Dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// UserKubeconfig issues a client certificate of the cluster CA for user (and
// groups) and writes a kubeconfig with it as <name>.kubeconfig: the credential of
// a component the caller runs itself (kube-proxy as system:kube-proxy, say), which
// RBAC then confines.
func (cp *ControlPlane) UserKubeconfig(name, user string, groups ...string) (string, error) {
	cert, key, err := cp.PKI.issueClient(name, user, groups...)
	if err != nil {
		return "", err
	}
	return cp.writeKubeconfig(name+".kubeconfig", cert, key)
}

// APIPort is the port the API server listens on, on 127.0.0.1.
func (cp *ControlPlane) APIPort() int { return cp.apiPort }
