package remote

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/vkubelet/vkubelet/providers/providerutil"
)

// This file holds the configuration of `--provider remote`: the endpoint, its
// TLS and the client's timings.

// Config is the JSON configuration of `--provider remote`.
type Config struct {
	// Endpoint is unix:///path/to.sock or host:port.
	Endpoint string `json:"endpoint"`
	// TLS, for a TCP endpoint: the CA of the provider's certificate, and a client
	// certificate for mutual TLS.
	TLS *TLSConfig `json:"tls,omitempty"`
	// Timeout bounds each call but the streams. Default 30s.
	Timeout providerutil.Duration `json:"timeout,omitzero"`
	// PollInterval is how often the statuses of a provider that does not notify are
	// read, all in one call. Default 5s.
	PollInterval providerutil.Duration `json:"pollInterval,omitzero"`
}

// TLSConfig secures a TCP endpoint.
type TLSConfig struct {
	CAFile     string `json:"caFile,omitempty"`
	CertFile   string `json:"certFile,omitempty"`
	KeyFile    string `json:"keyFile,omitempty"`
	ServerName string `json:"serverName,omitempty"`
}

// LoadConfig reads a Config from a JSON file, strictly.
func LoadConfig(path string) (Config, error) {
	var cfg Config
	if path == "" {
		return cfg, errors.New("remote provider: --provider-config must name the endpoint")
	}
	if err := providerutil.DecodeJSONFile(path, &cfg); err != nil {
		return cfg, fmt.Errorf("remote provider config: %w", err)
	}
	if cfg.Endpoint == "" {
		return cfg, fmt.Errorf("remote provider config %s: endpoint is required", path)
	}
	return cfg.withDefaults(), nil
}

func (cfg Config) withDefaults() Config {
	if cfg.Timeout.Duration <= 0 {
		cfg.Timeout.Duration = 30 * time.Second
	}
	if cfg.PollInterval.Duration <= 0 {
		cfg.PollInterval.Duration = 5 * time.Second
	}
	return cfg
}

// clientTLS is the TLS configuration of a TCP endpoint.
func clientTLS(t *TLSConfig) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, err
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("remote provider: no certificate in %s", t.CAFile)
		}
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, err
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}
