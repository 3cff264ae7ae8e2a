package kube

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLoadConfig(t *testing.T) {
	cases := []struct {
		name, json, wantErr string
		check               func(t *testing.T, c Config)
	}{
		{name: "defaults", json: `{"kubeconfig": "/k"}`, check: func(t *testing.T, c Config) {
			if c.ClusterID != "source" || c.NamespaceStrategy != NamespaceSuffix || c.pingTimeout != 5*time.Second || c.CountNodes != "type!=virtual-kubelet" {
				t.Errorf("defaults = %+v", c)
			}
		}},
		{name: "all set", json: `{"kubeconfig": "/k", "clusterID": "east", "namespaceStrategy": "same", "pingTimeout": "2s", "capacity": {"cpu": "8"}}`,
			check: func(t *testing.T, c Config) {
				if c.ClusterID != "east" || c.NamespaceStrategy != NamespaceSame || c.pingTimeout != 2*time.Second || c.capacity.Cpu().String() != "8" {
					t.Errorf("config = %+v", c)
				}
			}},
		{name: "no kubeconfig", json: `{}`, wantErr: "kubeconfig"},
		{name: "unknown field", json: `{"kubeconfig": "/k", "kubeconfg": "/x"}`, wantErr: "unknown field"},
		{name: "bad strategy", json: `{"kubeconfig": "/k", "namespaceStrategy": "prefix"}`, wantErr: "namespaceStrategy"},
		{name: "bad quantity", json: `{"kubeconfig": "/k", "capacity": {"cpu": "lots"}}`, wantErr: "capacity cpu"},
		{name: "bad selector", json: `{"kubeconfig": "/k", "countNodes": "a in ("}`, wantErr: "countNodes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "kube.json")
			if err := os.WriteFile(path, []byte(c.json), 0o644); err != nil {
				t.Fatal(err)
			}
			cfg, err := LoadConfig(path)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("error %v, want one mentioning %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c.check(t, cfg)
		})
	}
	if _, err := LoadConfig(""); err == nil {
		t.Error("an empty path must be an error: the kubeconfig is required")
	}
}
