package main

import (
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
