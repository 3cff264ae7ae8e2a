package agent

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/vkubelet/vkubelet/internal/apifeatures"
)

func TestTheKubeletAPIListensOnTheNodesAddressUnlessToldOtherwise(t *testing.T) {
	for _, tc := range []struct {
		listen, want string
	}{
		{"", "127.0.0.1"}, // the advertised --address
		{"0.0.0.0", "::"}, // --listen-address: every address (Go listens dual-stack)
	} {
		n, err := New(context.Background(), Config{
			NodeName: "vk", Provider: "mock", RESTConfig: &rest.Config{Host: "https://127.0.0.1:1"},
			InternalIP: "127.0.0.1", ListenAddress: tc.listen, KubeletPort: 0, APIFeatures: apifeatures.Without(),
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		if err != nil {
			t.Fatal(err)
		}
		got := n.kubeletListener.Addr().(*net.TCPAddr).IP
		n.kubeletListener.Close()
		if !got.Equal(net.ParseIP(tc.want)) && !(got.IsUnspecified() && net.ParseIP(tc.want).IsUnspecified()) {
			t.Errorf("--listen-address %q: listening on %s, want %s", tc.listen, got, tc.want)
		}
	}
}
