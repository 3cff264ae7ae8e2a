package providerutil

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// The node hands a provider a context carrying the span of the call (package
// pod makes them); a provider in another process continues the trace when the
// call carries that span's W3C trace context (traceparent, tracestate). These
// helpers put it on the wire and take it off, for gRPC (the remote protocol)
// and HTTP (interLink plugins). With tracing off the context has no span and
// nothing is sent.

var traceContext = propagation.TraceContext{}

// InjectTraceHeaders adds the trace context of ctx's span to h.
func InjectTraceHeaders(ctx context.Context, h http.Header) {
	if trace.SpanContextFromContext(ctx).IsValid() {
		traceContext.Inject(ctx, propagation.HeaderCarrier(h))
	}
}

// TraceDialOptions are the gRPC client options that send the trace context of
// each call's span in the call's metadata.
func TraceDialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			return invoker(withTraceMetadata(ctx), method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			return streamer(withTraceMetadata(ctx), desc, cc, method, opts...)
		}),
	}
}

// TraceServerOptions are the gRPC server options that give each call's
// context the span context its caller sent, as a remote parent.
func TraceServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			return handler(fromTraceMetadata(ctx), req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
			return handler(srv, tracedStream{ServerStream: ss, ctx: fromTraceMetadata(ss.Context())})
		}),
	}
}

func withTraceMetadata(ctx context.Context) context.Context {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	md, _ := metadata.FromOutgoingContext(ctx)
	md = md.Copy()
	traceContext.Inject(ctx, metadataCarrier(md))
	return metadata.NewOutgoingContext(ctx, md)
}

func fromTraceMetadata(ctx context.Context) context.Context {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return ctx
	}
	return traceContext.Extract(ctx, metadataCarrier(md))
}

// tracedStream is a server stream whose context carries the caller's span context.
type tracedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s tracedStream) Context() context.Context { return s.ctx }

// metadataCarrier lets the propagator read and write gRPC metadata.
type metadataCarrier metadata.MD

func (c metadataCarrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c metadataCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }

func (c metadataCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
