package jetstreamconsumer

import (
	"context"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/outboxkit/outbox/internal/tracing"
)

// traceContext returns ctx carrying the W3C trace context of a message's
// traceparent and tracestate headers, when it has a valid one, so the
// message's "outbox.consume" span continues the publisher's trace and the
// intents it records carry it. Header names match in any case; several
// tracestate values are joined as one list.
func traceContext(ctx context.Context, h nats.Header) context.Context {
	var traceParent string
	if v := headerValues(h, tracing.TraceParentHeader); len(v) > 0 {
		traceParent = v[0]
	}
	return tracing.Extract(ctx, traceParent, strings.Join(headerValues(h, tracing.TraceStateHeader), ","))
}

// headerValues are a header's values, its name matched in any case.
func headerValues(h nats.Header, name string) []string {
	if v, ok := h[name]; ok {
		return v
	}
	for k, v := range h {
		if strings.EqualFold(k, name) {
			return v
		}
	}
	return nil
}
