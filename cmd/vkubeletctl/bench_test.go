package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vkubelet/vkubelet/internal/lab/bench"
)

func TestBenchFlags(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		shape   bench.PodShape
		compare bench.Comparison
		wantErr bool
	}{
		{name: "defaults", shape: bench.ShapeDeployment},
		{name: "minimal shape", args: []string{"--pod-shape=minimal"}, shape: bench.ShapeMinimal},
		{name: "compare kwok", args: []string{"--compare", "kwok"}, shape: bench.ShapeDeployment, compare: bench.CompareKwok},
		{name: "both", args: []string{"--compare=kwok", "--pod-shape", "deployment"}, shape: bench.ShapeDeployment, compare: bench.CompareKwok},
		{name: "unknown shape", args: []string{"--pod-shape=daemonset"}, wantErr: true},
		{name: "unknown comparison", args: []string{"--compare=kind"}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := newBenchCommand()
			err := cmd.ParseFlags(tc.args)
			if (err != nil) != tc.wantErr {
				t.Fatalf("parsing %v: error %v, want error %v", tc.args, err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if got := cmd.Flags().Lookup("pod-shape").Value.String(); got != string(tc.shape) {
				t.Errorf("pod shape = %q, want %q", got, tc.shape)
			}
			if got := cmd.Flags().Lookup("compare").Value.String(); got != string(tc.compare) {
				t.Errorf("compare = %q, want %q", got, tc.compare)
			}
		})
	}
}

func TestBenchFindsTheNodeBinary(t *testing.T) {
	dir := t.TempDir()
	node := filepath.Join(dir, "vkubelet")
	if err := os.WriteFile(node, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := nodeBinary(node); err != nil || got != node {
		t.Errorf("--vkubelet %s: %q, %v; want the file itself", node, got, err)
	}
	t.Chdir(dir)
	if got, err := nodeBinary("./vkubelet"); err != nil || got != node {
		t.Errorf("--vkubelet ./vkubelet: %q, %v; want %s, absolute", got, err, node)
	}
	for _, path := range []string{filepath.Join(dir, "missing"), ""} {
		// Without --vkubelet: next to the test binary, where there is none.
		if _, err := nodeBinary(path); err == nil || !strings.Contains(err.Error(), "--vkubelet") {
			t.Errorf("--vkubelet %q: err = %v, want one naming --vkubelet", path, err)
		}
	}
}

// --replicas measures vkubelet's mock nodes alone, and says so rather than
// ignore the other comparisons.
func TestBenchReplicasRefusesOtherComparisons(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"--compare", "kwok"}, {"--provider", "cri"}, {"--upstream"}, {"--remote"}} {
		cmd := newBenchCommand()
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		cmd.SetArgs(append([]string{"--replicas", "3", "--nodes", "30", "--vkubelet", self}, args...))
		if err := cmd.ExecuteContext(context.Background()); err == nil || !strings.Contains(err.Error(), "--replicas measures") {
			t.Errorf("bench --replicas 3 %v: error %v", args, err)
		}
	}
}
