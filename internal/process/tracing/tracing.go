// Package tracing sets up OpenTelemetry tracing for a node process: spans of pod
// syncs, provider calls and status writes (package pod names them), batched and
// exported over OTLP/gRPC. It is off unless told where to send spans, by the
// node's flags or by the standard OTEL_EXPORTER_OTLP_ENDPOINT and
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT variables; the exporter reads the other
// OTEL_EXPORTER_OTLP_* variables (headers, certificates, timeout) as usual.
//
// internal/process/agent calls Setup; nothing else knows the SDK.
package tracing

import (
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// Config says where spans go and how many pods are traced.
type Config struct {
	// Endpoint is the host:port of an OTLP/gRPC receiver. Empty: the OTEL_*
	// variables say, and without them tracing is off.
	Endpoint string
	// Insecure sends spans over plaintext gRPC (a collector on the same host).
	Insecure bool
	// SamplingRatio is the fraction of traces recorded, in [0, 1]; a span whose
	// parent was sampled is always recorded. Negative: OTEL_TRACES_SAMPLER and
	// OTEL_TRACES_SAMPLER_ARG decide, and without them every trace is recorded.
	SamplingRatio float64
	// NodeName is recorded on every span's resource (k8s.node.name).
	NodeName string
	// ServiceName is the resource's service.name; empty: "vkubelet".
	ServiceName string
	// Attributes are more resource attributes, on every span.
	Attributes map[string]string
	// BatchTimeout is how long spans wait to be sent; zero: the SDK's 5 s.
	BatchTimeout time.Duration
}

// Enabled reports whether cfg (or the environment) says where to send spans.
func (cfg Config) Enabled() bool {
	return cfg.Endpoint != "" || os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Setup returns the tracer provider of the process and a function that sends the
// spans still buffered and stops it. When tracing is off the provider records
// nothing and costs nothing.
func Setup(ctx context.Context, cfg Config) (trace.TracerProvider, func(context.Context) error, error) {
	if !cfg.Enabled() {
		return tracenoop.NewTracerProvider(), func(context.Context) error { return nil }, nil
	}
	if cfg.SamplingRatio > 1 {
		return nil, nil, fmt.Errorf("tracing: sampling ratio %v is more than 1", cfg.SamplingRatio)
	}
	var opts []otlptracegrpc.Option
	if cfg.Endpoint != "" {
		opts = append(opts, otlptracegrpc.WithEndpoint(cfg.Endpoint))
	}
	if cfg.Insecure {
		opts = append(opts, otlptracegrpc.WithInsecure())
	}
	// The exporter connects lazily: a collector that is not up yet costs
	// dropped spans, never a node that does not start.
	exp, err := otlptracegrpc.New(ctx, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	var batch []sdktrace.BatchSpanProcessorOption
	if cfg.BatchTimeout > 0 {
		batch = append(batch, sdktrace.WithBatchTimeout(cfg.BatchTimeout))
	}
	tpOpts := []sdktrace.TracerProviderOption{
		sdktrace.WithBatcher(exp, batch...),
		sdktrace.WithResource(resource.NewSchemaless(resourceAttributes(cfg, fromEnv(ctx))...)),
	}
	if cfg.SamplingRatio >= 0 {
		tpOpts = append(tpOpts, sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SamplingRatio))))
	}
	tp := sdktrace.NewTracerProvider(tpOpts...)
	return tp, tp.Shutdown, nil
}

// fromEnv is what OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME say of the
// spans' resource, as the SDK reads them (a malformed entry is left out).
func fromEnv(ctx context.Context) []attribute.KeyValue {
	r, _ := resource.New(ctx, resource.WithFromEnv())
	if r == nil {
		return nil
	}
	return r.Attributes()
}

// resourceAttributes are the attributes of the spans' resource: those of the
// environment, then the configuration's, then the service and node names,
// which win. The service name is the configuration's, else the environment's
// (OTEL_SERVICE_NAME, or service.name in OTEL_RESOURCE_ATTRIBUTES), else
// "vkubelet".
func resourceAttributes(cfg Config, env []attribute.KeyValue) []attribute.KeyValue {
	service := cfg.ServiceName
	attrs := map[string]string{}
	for _, kv := range env {
		if kv.Key == "service.name" {
			if service == "" {
				service = kv.Value.Emit()
			}
			continue
		}
		attrs[string(kv.Key)] = kv.Value.Emit()
	}
	if service == "" {
		service = "vkubelet"
	}
	for k, v := range cfg.Attributes {
		attrs[k] = v
	}
	keys := make([]string, 0, len(attrs))
	for k := range attrs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var out []attribute.KeyValue
	for _, k := range keys {
		if k != "service.name" && k != "k8s.node.name" {
			out = append(out, attribute.String(k, attrs[k]))
		}
	}
	return append(out, attribute.String("service.name", service), attribute.String("k8s.node.name", cfg.NodeName))
}
