package sdk_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/vkubelet/vkubelet/provider"
	"github.com/vkubelet/vkubelet/sdk"
)

// providersOf is what `providers` prints with the program's providers.
func providersOf(t *testing.T, providers ...sdk.Provider) []string {
	t.Helper()
	cmd, err := sdk.Command(providers...)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd.SetArgs([]string{"providers"})
	cmd.SetOut(&out)
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	return strings.Fields(out.String())
}

func TestProvidersListsTheProgramsBesideTheBuiltInOnes(t *testing.T) {
	builtin := providersOf(t)
	if !slices.Contains(builtin, "mock") || !slices.Contains(builtin, "remote") {
		t.Fatalf("providers printed %q without the program's, want the built-in ones", builtin)
	}
	want := slices.Sorted(slices.Values(append(slices.Clone(builtin), "nowhere")))
	if got := providersOf(t, sdk.Provider{Name: "nowhere", New: newNowhere}); !slices.Equal(got, want) {
		t.Errorf("providers printed %q, want %q", got, want)
	}
}

func TestCommandRefusesAProviderItCannotName(t *testing.T) {
	ctor := newNowhere
	for _, tc := range []struct {
		name      string
		providers []sdk.Provider
		want      string
	}{
		{"no name", []sdk.Provider{{New: ctor}}, "without a name"},
		{"a built-in's name", []sdk.Provider{{Name: "mock", New: ctor}}, `"mock": a built-in provider has that name`},
		{"twice the same name", []sdk.Provider{{Name: "edge", New: ctor}, {Name: "edge", New: ctor}}, `"edge" is registered already`},
		{"no constructor", []sdk.Provider{{Name: "edge"}}, `"edge": New is nil`},
		{"not a label value", []sdk.Provider{{Name: "my provider", New: ctor}}, "value of the node's taint"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := sdk.Command(tc.providers...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one saying %q", err, tc.want)
			}
		})
	}
}

// errBuilt stops `provider serve` once the provider is built, before it listens.
var errBuilt = errors.New("built")

func TestAProviderIsBuiltWithTheFlagsOfItsNode(t *testing.T) {
	var got sdk.ProviderConfig
	cmd, err := sdk.Command(sdk.Provider{Name: "edge", New: func(_ context.Context, cfg sdk.ProviderConfig) (provider.PodLifecycleHandler, error) {
		got = cfg
		return nil, errBuilt
	}})
	if err != nil {
		t.Fatal(err)
	}
	cmd.SetArgs([]string{"provider", "serve", "--provider", "edge", "--nodename", "edge-1", "--provider-config", "/etc/edge.json", "--listen", "unix:///nowhere.sock"})
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	if err := cmd.Execute(); !errors.Is(err, errBuilt) {
		t.Fatalf("provider serve: err = %v, want the constructor's", err)
	}
	if got.NodeName != "edge-1" || got.ConfigPath != "/etc/edge.json" || got.Logger == nil {
		t.Errorf("the constructor got %+v, want node edge-1, config /etc/edge.json and a logger", got)
	}
	if got.Client != nil {
		t.Errorf("the constructor got a client under provider serve, which runs no node")
	}
}
