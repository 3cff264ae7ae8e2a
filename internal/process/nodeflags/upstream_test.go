package nodeflags

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// parseNode parses args as the node command's flags and applies the upstream ones.
func parseNode(t *testing.T, args ...string) (*Flags, error) {
	t.Helper()
	f := Default()
	fs := pflag.NewFlagSet("vkubelet", pflag.ContinueOnError)
	f.Register(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parsing %v: %v", args, err)
	}
	return f, f.Apply(fs)
}

func TestUpstreamFlagsKeepTheirMeaning(t *testing.T) {
	f, err := parseNode(t, "--client-verify-ca", "/ca.pem", "--trace-sample-rate", "25", "--trace-service-name", "vk-east",
		"--trace-tag", "cluster=east", "--stream-idle-timeout", "30s", "--stream-creation-timeout", "10s",
		"--enable-node-lease", "--authentication-token-webhook", "--authentication-token-webhook-cache-ttl", "1m",
		"--authorization-webhook-cache-authorized-ttl", "2m", "--authorization-webhook-cache-unauthorized-ttl", "3s",
		"--klog.v", "4")
	if err != nil {
		t.Fatal(err)
	}
	c := f.Config
	if c.ClientCAFile != "/ca.pem" || c.Tracing.SamplingRatio != 0.25 || c.Tracing.ServiceName != "vk-east" ||
		c.Tracing.Attributes["cluster"] != "east" || c.StreamIdleTimeout != 30*time.Second || c.StreamCreationTimeout != 10*time.Second ||
		c.TokenCacheTTL != time.Minute || c.AllowCacheTTL != 2*time.Minute || c.DenyCacheTTL != 3*time.Second {
		t.Errorf("config = %+v", c)
	}
	for rate, want := range map[string]float64{"always": 1, "never": 0, "100": 1, "0": 0} {
		if f, err := parseNode(t, "--trace-sample-rate", rate); err != nil || f.Config.Tracing.SamplingRatio != want {
			t.Errorf("--trace-sample-rate %s: ratio %v, err %v; want %v", rate, f.Config.Tracing.SamplingRatio, err, want)
		}
	}
}

func TestUpstreamFlagsWithoutAnEquivalentNameTheReplacement(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--namespace", "team-a"}, "taint"},
		{[]string{"--taint", "foo"}, "--disable-taint"},
		{[]string{"--enable-node-lease=false"}, "Lease"},
		{[]string{"--trace-exporter", "jaeger"}, "--tracing-endpoint"},
		{[]string{"--trace-zpages-addr", ":8888"}, "--tracing-endpoint"},
		{[]string{"--trace-sample-rate", "150"}, "percentage"},
		{[]string{"--trace-sample-rate", "50", "--tracing-sampling-ratio", "0.5"}, "give one"},
		{[]string{"--client-verify-ca", "/a.pem", "--client-ca-file", "/b.pem"}, "give one"},
		{[]string{"--no-verify-clients"}, "always authenticates"},
		{[]string{"--authentication-token-webhook=false"}, "TokenReview"},
	} {
		_, err := parseNode(t, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err = %v, want one naming %q", c.args, err, c.want)
		}
	}
}

func TestUpstreamTaintVariablesAreRefused(t *testing.T) {
	t.Setenv("VK_TAINT_KEY", "example.com/vk")
	if _, err := parseNode(t); err == nil || !strings.Contains(err.Error(), "VK_TAINT_KEY") {
		t.Errorf("err = %v, want one about $VK_TAINT_KEY", err)
	}
}
