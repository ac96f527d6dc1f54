// Package tracing carries an intent's trace from the message that recorded
// it to the attempts that dispatch it: the W3C trace context (traceparent
// and tracestate) of the recording span is stored with the intent, and each
// dispatch attempt's span links to it. It keeps no state of its own and
// never reads OpenTelemetry's globals: tracers come from the TracerProvider
// a caller configures, otel's no-op one when none is.
package tracing

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Name is the instrumentation scope of the outbox's spans.
const Name = "github.com/outboxkit/outbox"

// The W3C Trace Context header names.
const (
	TraceParentHeader = "traceparent"
	TraceStateHeader  = "tracestate"
)

// Tracer returns tp's tracer for the outbox; with a nil tp, otel's no-op
// tracer (never the global provider's). The no-op tracer still passes a
// span context found in ctx on to the contexts it returns.
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	return tp.Tracer(Name)
}

// Inject returns the W3C traceparent and tracestate of the span context in
// ctx, local or remote; both empty when ctx holds no valid one. tracestate
// is empty when there is none.
func Inject(ctx context.Context) (traceParent, traceState string) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return "", ""
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c[TraceParentHeader], c[TraceStateHeader]
}

// SpanContext parses a stored traceparent and tracestate; the result is
// not valid (trace.SpanContext.IsValid) when traceParent is empty or
// malformed.
func SpanContext(traceParent, traceState string) trace.SpanContext {
	if traceParent == "" {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(Extract(context.Background(), traceParent, traceState))
}

// Extract returns ctx carrying the remote span context a traceparent and
// tracestate name (as a broker's message headers carry them), so spans
// started from it continue that trace. ctx is returned as it is when
// traceParent is empty or malformed.
func Extract(ctx context.Context, traceParent, traceState string) context.Context {
	if traceParent == "" {
		return ctx
	}
	c := propagation.MapCarrier{TraceParentHeader: strings.TrimSpace(traceParent)}
	if traceState != "" {
		c[TraceStateHeader] = traceState
	}
	return propagation.TraceContext{}.Extract(ctx, c)
}
