package nodeflags

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"
)

// upstreamFlags are the flags of upstream virtual-kubelet's command that vkubelet
// has under another name or not at all. Each is accepted with upstream's meaning
// when vkubelet can give it that meaning, else refused with a message naming what
// to use instead (docs/MIGRATING.md). Flags with the same name and meaning
// (--nodename, --provider, --kubeconfig, …) are simply vkubelet's own.
type upstreamFlags struct {
	namespace        string
	taint            string
	enableNodeLease  bool
	traceExporters   []string
	traceZpagesAddr  string
	traceServiceName string
	traceTags        map[string]string
	traceSampleRate  string
	clientVerifyCA   string
	noVerifyClients  bool
	tokenWebhook     bool
}

func (u *upstreamFlags) register(fs *pflag.FlagSet, f *Flags) {
	c := &f.Config
	hide := func(name string) { _ = fs.MarkHidden(name) }
	fs.StringVar(&u.namespace, "namespace", "", "upstream virtual-kubelet: only pods of this namespace (not supported)")
	fs.StringVar(&u.taint, "taint", "", "upstream virtual-kubelet: the taint's key (not supported)")
	fs.BoolVar(&u.enableNodeLease, "enable-node-lease", true, "upstream virtual-kubelet: node leases (always on)")
	fs.StringSliceVar(&u.traceExporters, "trace-exporter", nil, "upstream virtual-kubelet: OpenCensus exporters (use --tracing-endpoint)")
	fs.StringVar(&u.traceZpagesAddr, "trace-zpages-addr", "", "upstream virtual-kubelet: OpenCensus zPages (not supported)")
	fs.StringVar(&u.traceServiceName, "trace-service-name", "", "upstream virtual-kubelet: the traces' service name")
	fs.StringToStringVar(&u.traceTags, "trace-tag", nil, "upstream virtual-kubelet: key=value attributes of every trace")
	fs.StringVar(&u.traceSampleRate, "trace-sample-rate", "", "upstream virtual-kubelet: always, never or a percentage of traces recorded")
	fs.DurationVar(&c.StreamIdleTimeout, "stream-idle-timeout", c.StreamIdleTimeout, "exec, attach and port-forward sessions idle this long are closed (0: 4h)")
	fs.DurationVar(&c.StreamCreationTimeout, "stream-creation-timeout", c.StreamCreationTimeout, "bound on the exec, attach and port-forward handshake (0: 30s)")
	fs.StringVar(&u.clientVerifyCA, "client-verify-ca", os.Getenv("APISERVER_CA_CERT_LOCATION"), "upstream virtual-kubelet's name of --client-ca-file ($APISERVER_CA_CERT_LOCATION)")
	fs.BoolVar(&u.noVerifyClients, "no-verify-clients", false, "upstream virtual-kubelet: accept unauthenticated callers (not supported)")
	fs.BoolVar(&u.tokenWebhook, "authentication-token-webhook", true, "bearer tokens are authenticated by TokenReview (always on)")
	fs.DurationVar(&c.TokenCacheTTL, "authentication-token-webhook-cache-ttl", c.TokenCacheTTL, "how long TokenReview answers are cached (0: 2m)")
	fs.DurationVar(&c.AllowCacheTTL, "authorization-webhook-cache-authorized-ttl", c.AllowCacheTTL, "how long allowing SubjectAccessReview answers are cached (0: 5m)")
	fs.DurationVar(&c.DenyCacheTTL, "authorization-webhook-cache-unauthorized-ttl", c.DenyCacheTTL, "how long denying SubjectAccessReview answers are cached (0: 30s)")
	for _, name := range []string{"namespace", "taint", "enable-node-lease", "trace-exporter", "trace-zpages-addr",
		"trace-service-name", "trace-tag", "trace-sample-rate", "client-verify-ca", "no-verify-clients", "authentication-token-webhook"} {
		hide(name)
	}
	// Upstream exposes klog's flags as --klog.<name>; here they set klog, which
	// carries client-go's logs into vkubelet's own log stream.
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	klogFlags.VisitAll(func(kf *flag.Flag) {
		kf.Name = "klog." + kf.Name
		fs.AddGoFlag(kf)
		hide(kf.Name)
	})
}

// apply checks the upstream flags given on fs and carries their meaning into f,
// or says why they cannot be given.
func (u *upstreamFlags) apply(fs *pflag.FlagSet, f *Flags) error {
	c := &f.Config
	set := fs.Changed
	if u.namespace != "" {
		return fmt.Errorf("--namespace is not supported: vkubelet, like the kubelet, runs every pod bound to its node; keep other pods off the node with its taint (virtual-kubelet.io/provider) and tolerations")
	}
	if set("taint") {
		return fmt.Errorf("--taint is not supported (upstream deprecated it too): the node's taint is virtual-kubelet.io/provider=<provider>:NoSchedule; --disable-taint removes it")
	}
	for _, env := range []string{"VK_TAINT_KEY", "VK_TAINT_VALUE", "VK_TAINT_EFFECT"} {
		if os.Getenv(env) != "" {
			return fmt.Errorf("$%s is not supported: the node's taint is virtual-kubelet.io/provider=<provider>:NoSchedule; --disable-taint removes it", env)
		}
	}
	if !u.enableNodeLease {
		return fmt.Errorf("--enable-node-lease=false is not supported: vkubelet always heartbeats with a Lease in kube-node-lease, as kubelets do since Kubernetes 1.17")
	}
	if len(u.traceExporters) > 0 {
		return fmt.Errorf("--trace-exporter %s is not supported: vkubelet exports OpenTelemetry traces over OTLP; use --tracing-endpoint host:port (or $OTEL_EXPORTER_OTLP_ENDPOINT) of a collector, which can forward to Jaeger and others",
			strings.Join(u.traceExporters, ","))
	}
	if u.traceZpagesAddr != "" {
		return fmt.Errorf("--trace-zpages-addr is not supported: OpenCensus zPages are gone with OpenCensus; vkubelet exports its traces over OTLP (--tracing-endpoint host:port), and a collector shows them")
	}
	c.Tracing.ServiceName = u.traceServiceName
	c.Tracing.Attributes = u.traceTags
	if u.traceSampleRate != "" {
		if set("tracing-sampling-ratio") {
			return fmt.Errorf("--trace-sample-rate and --tracing-sampling-ratio say the same; give one")
		}
		ratio, err := sampleRate(u.traceSampleRate)
		if err != nil {
			return err
		}
		c.Tracing.SamplingRatio = ratio
	}
	if u.clientVerifyCA != "" {
		if set("client-ca-file") && c.ClientCAFile != u.clientVerifyCA {
			return fmt.Errorf("--client-verify-ca and --client-ca-file name different files; give one")
		}
		c.ClientCAFile = u.clientVerifyCA
	}
	if !u.tokenWebhook {
		return fmt.Errorf("--authentication-token-webhook=false is not supported: the kubelet API always authenticates bearer tokens by TokenReview, and client certificates by --client-ca-file")
	}
	if u.noVerifyClients {
		return fmt.Errorf("--no-verify-clients is not supported: the kubelet API always authenticates callers (client certificate or bearer token) and authorizes them on nodes/<name>, as the kubelet does")
	}
	return nil
}

// sampleRate turns upstream's --trace-sample-rate (always, never, or a
// percentage from 0 to 100) into a sampling ratio.
func sampleRate(v string) (float64, error) {
	switch v {
	case "always":
		return 1, nil
	case "never":
		return 0, nil
	}
	pct, err := strconv.Atoi(v)
	if err != nil || pct < 0 || pct > 100 {
		return 0, fmt.Errorf("--trace-sample-rate %q: want always, never or a percentage from 0 to 100 (or --tracing-sampling-ratio 0..1)", v)
	}
	return float64(pct) / 100, nil
}
