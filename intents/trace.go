package intents

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Span names and attributes of consuming (Config.TracerProvider).
const (
	spanConsume      = "outbox.consume"
	spanConsumeBatch = "outbox.consume_batch"

	attrConsumer  = attribute.Key("outbox.consumer")
	attrMessageID = attribute.Key("outbox.message_id")
	attrDuplicate = attribute.Key("outbox.duplicate")
	attrIntents   = attribute.Key("outbox.intents")
	attrMessages  = attribute.Key("outbox.messages")
)

// startConsume starts the span msg is processed in. The intents it records
// carry this span's trace context.
func (c *Client) startConsume(ctx context.Context, msg Message) (context.Context, trace.Span) {
	return c.tracer.Start(ctx, spanConsume, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attrConsumer.String(msg.Consumer), attrMessageID.String(msg.ID)))
}

// endSpan records how processing ended (an error, or attrs), then ends
// span. Only the outcome is recorded: never a payload.
func endSpan(span trace.Span, err error, attrs ...attribute.KeyValue) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	} else {
		span.SetAttributes(attrs...)
	}
	span.End()
}

// resultAttrs describes a message's result on its span.
func resultAttrs(duplicate bool, intents int) []attribute.KeyValue {
	return []attribute.KeyValue{attrDuplicate.Bool(duplicate), attrIntents.Int(intents)}
}
