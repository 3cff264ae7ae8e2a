package mock

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestLoadConfig(t *testing.T) {
	for _, tc := range []struct {
		name    string
		json    string // no file when empty
		want    Config
		wantErr string // substring of the error; empty for success
	}{
		{
			name: "no file gives the defaults",
			want: Config{CPU: "20", Memory: "100Gi", Pods: "1000"},
		},
		{
			name: "every field",
			json: `{"cpu": "8", "memory": "32Gi", "pods": "110", "extended": {"nvidia.com/gpu": "4"},
				"zone": "z1", "region": "r1", "providerID": "mock://x", "startDelay": "3s", "stopDelay": "1m30s",
				"failureRate": 0.25, "seed": 9, "stateFile": "/tmp/s.json"}`,
			want: Config{
				CPU: "8", Memory: "32Gi", Pods: "110", Extended: map[string]string{"nvidia.com/gpu": "4"},
				Zone: "z1", Region: "r1", ProviderID: "mock://x",
				StartDelay: Duration{Duration: 3 * time.Second}, StopDelay: Duration{Duration: 90 * time.Second},
				FailureRate: 0.25, Seed: 9, StateFile: "/tmp/s.json",
			},
		},
		{name: "unknown field is named", json: `{"cpus": "8"}`, wantErr: `"cpus"`},
		{name: "bad quantity", json: `{"memory": "lots"}`, wantErr: "memory"},
		{name: "bad extended quantity", json: `{"extended": {"example.com/foo": "x"}}`, wantErr: "example.com/foo"},
		{name: "negative quantity", json: `{"pods": "-1"}`, wantErr: "pods"},
		{name: "duration not a string", json: `{"startDelay": 3}`, wantErr: "duration"},
		{name: "bad duration", json: `{"stopDelay": "soon"}`, wantErr: "soon"},
		{name: "negative duration", json: `{"stopDelay": "-1s"}`, wantErr: "stopDelay"},
		{name: "failure rate above 1", json: `{"failureRate": 1.5}`, wantErr: "failureRate"},
		{name: "trailing data", json: `{} {}`, wantErr: "after"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := ""
			if tc.json != "" {
				path = filepath.Join(t.TempDir(), "mock.json")
				if err := os.WriteFile(path, []byte(tc.json), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			got, err := LoadConfig(path)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("LoadConfig: %v, want an error mentioning %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("LoadConfig: %v", err)
			}
			if got.CPU != tc.want.CPU || got.Memory != tc.want.Memory || got.Pods != tc.want.Pods ||
				got.Zone != tc.want.Zone || got.Region != tc.want.Region || got.ProviderID != tc.want.ProviderID ||
				got.StartDelay != tc.want.StartDelay || got.StopDelay != tc.want.StopDelay ||
				got.FailureRate != tc.want.FailureRate || got.Seed != tc.want.Seed || got.StateFile != tc.want.StateFile ||
				len(got.Extended) != len(tc.want.Extended) || got.Extended["nvidia.com/gpu"] != tc.want.Extended["nvidia.com/gpu"] {
				t.Errorf("LoadConfig = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestLoadConfigMissingFile(t *testing.T) {
	_, err := LoadConfig(filepath.Join(t.TempDir(), "absent.json"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("LoadConfig of a missing file: %v, want ErrNotExist", err)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	if _, err := New(Config{CPU: "many"}, "node-1"); err == nil {
		t.Error("New accepted cpu \"many\"")
	}
}

func TestConfigureNode(t *testing.T) {
	for _, tc := range []struct {
		name       string
		cfg        Config
		providerID string
		labels     map[string]string
	}{
		{name: "defaults", providerID: "mock://node-1", labels: map[string]string{"existing": "yes"}},
		{
			name:       "topology and provider ID",
			cfg:        Config{Zone: "z1", Region: "r1", ProviderID: "mock://custom"},
			providerID: "mock://custom",
			labels:     map[string]string{"existing": "yes", corev1.LabelTopologyZone: "z1", corev1.LabelTopologyRegion: "r1"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Extended = map[string]string{"nvidia.com/gpu": "4"}
			p, _ := newTestProvider(t, cfg)
			node := &corev1.Node{}
			node.Labels = map[string]string{"existing": "yes"}
			node.Status.NodeInfo.Architecture = "arm64"
			p.ConfigureNode(context.Background(), node)

			want := map[corev1.ResourceName]string{"cpu": "20", "memory": "100Gi", "pods": "1000", "nvidia.com/gpu": "4"}
			for _, list := range []corev1.ResourceList{node.Status.Capacity, node.Status.Allocatable} {
				if len(list) != len(want) {
					t.Errorf("resources %v, want %v", list, want)
				}
				for name, v := range want {
					if q := list[name]; q.Cmp(resource.MustParse(v)) != 0 {
						t.Errorf("%s = %s, want %s", name, q.String(), v)
					}
				}
			}
			if node.Spec.ProviderID != tc.providerID {
				t.Errorf("providerID = %q, want %q", node.Spec.ProviderID, tc.providerID)
			}
			if len(node.Labels) != len(tc.labels) {
				t.Errorf("labels = %v, want %v", node.Labels, tc.labels)
			}
			for k, v := range tc.labels {
				if node.Labels[k] != v {
					t.Errorf("label %s = %q, want %q", k, node.Labels[k], v)
				}
			}
			if node.Status.NodeInfo.Architecture != "arm64" {
				t.Error("ConfigureNode changed nodeInfo")
			}
		})
	}
}

func TestSetCapacityNotifiesNodeStatus(t *testing.T) {
	p, _ := newTestProvider(t, Config{})
	ctx := context.Background()
	node := &corev1.Node{}
	node.Name = "node-1"
	p.ConfigureNode(ctx, node)

	got := make(chan *corev1.Node, 1)
	p.NotifyNodeStatus(ctx, func(n *corev1.Node) {
		p.Ping(ctx) // takes the lock: SetCapacity must not hold it
		got <- n
	})
	p.SetCapacity(corev1.ResourceList{corev1.ResourcePods: resource.MustParse("5")})
	n := <-got
	if q := n.Status.Capacity[corev1.ResourcePods]; q.Value() != 5 {
		t.Errorf("notified pods capacity %s, want 5", q.String())
	}
	if q := n.Status.Allocatable[corev1.ResourcePods]; q.Value() != 5 {
		t.Errorf("notified pods allocatable %s, want 5", q.String())
	}
	if q := n.Status.Capacity[corev1.ResourceCPU]; q.Value() != 20 {
		t.Errorf("notified cpu capacity %s, want 20 (kept)", q.String())
	}
	if n.Name != "node-1" {
		t.Errorf("notified node %q, want node-1", n.Name)
	}
}

func TestPing(t *testing.T) {
	p, _ := newTestProvider(t, Config{})
	ctx := context.Background()
	if err := p.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	boom := errors.New("back end down")
	p.SetPingError(boom)
	if err := p.Ping(ctx); !errors.Is(err, boom) {
		t.Errorf("Ping: %v, want %v", err, boom)
	}
	p.SetPingError(nil)
	if err := p.Ping(ctx); err != nil {
		t.Errorf("Ping after clearing the error: %v", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := p.Ping(cancelled); !errors.Is(err, context.Canceled) {
		t.Errorf("Ping with an ended context: %v, want context.Canceled", err)
	}
}
