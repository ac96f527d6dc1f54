package amqpconsumer

import (
	"context"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxkit/outbox/internal/tracing"
)

// traceContext returns ctx carrying the W3C trace context of a delivery's
// traceparent and tracestate headers, when it has a valid one, so the
// message's "outbox.consume" span continues the publisher's trace and the
// intents it records carry it. Header names match in any case.
func traceContext(ctx context.Context, h amqp.Table) context.Context {
	return tracing.Extract(ctx, headerText(h, tracing.TraceParentHeader), headerText(h, tracing.TraceStateHeader))
}

// headerText is a string (or bytes) header's value, or "".
func headerText(h amqp.Table, name string) string {
	v, ok := h[name]
	if !ok {
		for k, hv := range h {
			if strings.EqualFold(k, name) {
				v = hv
				break
			}
		}
	}
	switch s := v.(type) {
	case string:
		return s
	case []byte:
		return string(s)
	}
	return ""
}
