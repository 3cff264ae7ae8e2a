package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/kubernetes"

	"github.com/vkubelet/vkubelet/internal/identity"
	"github.com/vkubelet/vkubelet/kubeletapi"
)

// This file holds the node's kubelet API: where it listens, its serving
// certificate, and its authentication and authorization, delegated to the API
// server.

// listenHost is the host the kubelet API listens on: the configured listen
// address, else the address the node advertises, so that a node does not open its
// port on every interface unless told to.
func listenHost(cfg Config) string {
	if cfg.ListenAddress != "" {
		return cfg.ListenAddress
	}
	return cfg.InternalIP
}

// KubeletPort is the port the kubelet API listens on.
func (n *Node) KubeletPort() int32 { return n.cfg.KubeletPort }

// serveKubeletAPI obtains the serving certificate and serves the kubelet API.
func (n *Node) serveKubeletAPI(ctx context.Context) error {
	defer n.kubeletListener.Close()
	var ips []net.IP
	if ip := net.ParseIP(n.cfg.InternalIP); ip != nil {
		ips = append(ips, ip)
	}
	var approver kubernetes.Interface
	if n.cfg.ServingCSRApprover != nil {
		var err error
		if approver, err = kubernetes.NewForConfig(n.cfg.ServingCSRApprover); err != nil {
			return err
		}
	}
	cert, err := identity.ServingCertificate(ctx, identity.ServingConfig{
		CertFile: n.cfg.ServingCertFile, KeyFile: n.cfg.ServingKeyFile, SelfSigned: n.cfg.SelfSignedServingCert,
		NodeName: n.cfg.NodeName, IPs: ips, DNSNames: []string{n.cfg.NodeName},
		Client: n.client, Approver: approver, Dir: certDir(n.cfg), AutoApprove: n.cfg.ApproveServingCSR, Logger: n.log,
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("kubelet API: %w", err)
	}
	authn, authz, err := n.kubeletAuth(ctx)
	if err != nil {
		return err
	}
	srv, err := kubeletapi.NewServer(kubeletapi.Config{
		NodeName: n.cfg.NodeName, Provider: n.provider, Authenticator: authn, Authorizer: authz, Logger: n.log,
		Metrics: n.apiMetrics, Gatherer: n.gatherer, Ready: n.ready,
		StreamIdleTimeout: n.cfg.StreamIdleTimeout, StreamCreationTimeout: n.cfg.StreamCreationTimeout,
	})
	if err != nil {
		return err
	}
	n.partReady()
	if n.cfg.Shared != nil {
		return n.cfg.Shared.port.Serve(ctx, srv, n.kubeletListener, cert)
	}
	return srv.Serve(ctx, n.kubeletListener, cert)
}

// kubeletAuth is the authenticator and authorizer of the kubelet API: the
// process's, shared by its nodes, or the node's own. They delegate to the API
// server (TokenReview, SubjectAccessReview) and cache its answers, and accept
// client certificates of the cluster's client CA.
func (n *Node) kubeletAuth(ctx context.Context) (authenticator.Request, authorizer.Authorizer, error) {
	build := func(ctx context.Context) (authenticator.Request, authorizer.Authorizer, error) {
		caFile := n.cfg.ClientCAFile
		if caFile == "" {
			var err error
			if caFile, err = n.clusterClientCA(ctx, certDir(n.cfg)); err != nil {
				n.log.Warn("no client CA: the kubelet API accepts bearer tokens only", "error", err)
			}
		}
		return kubeletapi.NewDelegatingAuth(ctx, kubeletapi.AuthConfig{Client: n.client, ClientCAFile: caFile,
			TokenCacheTTL: n.cfg.TokenCacheTTL, AllowCacheTTL: n.cfg.AllowCacheTTL, DenyCacheTTL: n.cfg.DenyCacheTTL})
	}
	if n.cfg.Shared != nil {
		return n.cfg.Shared.kubeletAuth(build)
	}
	return build(ctx)
}

// clusterClientCA writes the CA the API server trusts for client certificates,
// published in kube-system/extension-apiserver-authentication, to dir.
func (n *Node) clusterClientCA(ctx context.Context, dir string) (string, error) {
	cm, err := n.client.CoreV1().ConfigMaps("kube-system").Get(ctx, "extension-apiserver-authentication", metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	ca := cm.Data["client-ca-file"]
	if ca == "" {
		return "", errors.New("extension-apiserver-authentication has no client-ca-file")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "client-ca.crt")
	return path, os.WriteFile(path, []byte(ca), 0o644)
}
