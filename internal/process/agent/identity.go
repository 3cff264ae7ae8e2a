package agent

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/vkubelet/vkubelet/internal/identity"
)

// certDir is where the node keeps its certificates: CertDir, else a directory of
// its own under the system's temporary directory.
func certDir(cfg Config) string {
	if cfg.CertDir != "" {
		return cfg.CertDir
	}
	return filepath.Join(os.TempDir(), "vkubelet-"+cfg.NodeName, "pki")
}

// OwnIdentity reports whether the node authenticates as itself
// (system:node:<name>), through a bootstrap credential: its client may then read
// only its own pods and the objects they reference.
func (c Config) OwnIdentity() bool {
	return c.BootstrapKubeconfig != "" || c.BootstrapRESTConfig != nil
}

// clientConfig is the credential the node uses towards the API server: its own
// client certificate when a bootstrap credential is configured (obtained within
// ctx, renewed until certCtx ends), else RESTConfig, else Kubeconfig (or the
// in-cluster configuration).
func clientConfig(ctx, certCtx context.Context, cfg Config) (*rest.Config, error) {
	if cfg.RESTConfig != nil {
		return cfg.RESTConfig, nil
	}
	bootstrap := cfg.BootstrapRESTConfig
	if bootstrap == nil && cfg.BootstrapKubeconfig != "" {
		if cfg.Kubeconfig != "" {
			if _, err := os.Stat(cfg.Kubeconfig); err == nil {
				// As the kubelet: an existing kubeconfig is used as it is.
				return loadKubeconfig(cfg.Kubeconfig)
			}
		}
		var err error
		if bootstrap, err = loadKubeconfig(cfg.BootstrapKubeconfig); err != nil {
			return nil, fmt.Errorf("--bootstrap-kubeconfig: %w", err)
		}
	}
	if bootstrap == nil {
		return loadKubeconfig(cfg.Kubeconfig)
	}
	// The wait for the first certificate is bounded by ctx; its renewals go on
	// until certCtx ends.
	type result struct {
		cfg *rest.Config
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, err := identity.StartClient(certCtx, identity.ClientConfig{
			NodeName: cfg.NodeName, Bootstrap: bootstrap, Dir: certDir(cfg),
			WaitTimeout: cfg.StartupTimeout, Logger: cfg.Logger,
		})
		done <- result{c, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if r.err != nil {
		return nil, fmt.Errorf("node client certificate: %w", r.err)
	}
	if cfg.Kubeconfig != "" && cfg.BootstrapKubeconfig != "" {
		if err := writeNodeKubeconfig(cfg.Kubeconfig, r.cfg); err != nil {
			return nil, err
		}
	}
	return r.cfg, nil
}

// servingApprover is the credential that approves the node's own serving CSR
// when ApproveServingCSR is set: ServingCSRApprover, else the bootstrap
// credential, since a node's own identity may not approve CSRs. In a cluster the
// chart's ServiceAccount is that bootstrap credential, allowed to approve
// kubelet-serving CSRs and nothing else (docs/DEPLOYING.md). Nil means the node's
// own credential.
func servingApprover(cfg Config) (*rest.Config, error) {
	switch {
	case !cfg.ApproveServingCSR || cfg.ServingCSRApprover != nil:
		return cfg.ServingCSRApprover, nil
	case cfg.BootstrapRESTConfig != nil:
		return cfg.BootstrapRESTConfig, nil
	case cfg.BootstrapKubeconfig != "":
		c, err := loadKubeconfig(cfg.BootstrapKubeconfig)
		if err != nil {
			return nil, fmt.Errorf("--bootstrap-kubeconfig, to approve the serving CSR: %w", err)
		}
		return c, nil
	}
	return nil, nil
}

func loadKubeconfig(path string) (*rest.Config, error) {
	c, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: path}, nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig %q: %w", path, err)
	}
	return c, nil
}

// writeNodeKubeconfig writes a kubeconfig for c, which names its certificate and
// key by file, as the kubelet writes its --kubeconfig after a TLS bootstrap.
func writeNodeKubeconfig(path string, c *rest.Config) error {
	if c.TLSClientConfig.CertFile == "" {
		return errors.New("node client configuration has no certificate file")
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["default-cluster"] = &clientcmdapi.Cluster{Server: c.Host,
		CertificateAuthority: c.TLSClientConfig.CAFile, CertificateAuthorityData: c.TLSClientConfig.CAData}
	kc.AuthInfos["default-auth"] = &clientcmdapi.AuthInfo{ClientCertificate: c.TLSClientConfig.CertFile, ClientKey: c.TLSClientConfig.KeyFile}
	kc.Contexts["default-context"] = &clientcmdapi.Context{Cluster: "default-cluster", AuthInfo: "default-auth"}
	kc.CurrentContext = "default-context"
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("writing the node's kubeconfig %s: %w", path, err)
	}
	return nil
}

// asNode reports whether c authenticates with a node's client certificate
// (subject system:node:<name>), as after a TLS bootstrap or with a kubeconfig
// the kubelet wrote. Other credentials (tokens, exec plugins) are not nodes'.
func asNode(c *rest.Config) bool {
	data := c.TLSClientConfig.CertData
	if len(data) == 0 && c.TLSClientConfig.CertFile != "" {
		var err error
		if data, err = os.ReadFile(c.TLSClientConfig.CertFile); err != nil {
			return false
		}
	}
	for len(data) > 0 {
		var block *pem.Block
		if block, data = pem.Decode(data); block == nil {
			return false
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return false
		}
		return strings.HasPrefix(cert.Subject.CommonName, "system:node:") && slices.Contains(cert.Subject.Organization, "system:nodes")
	}
	return false
}
