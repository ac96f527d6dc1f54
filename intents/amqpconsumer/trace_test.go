package amqpconsumer_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/intents/amqpconsumer"
	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/amqpprovider"
)

// A delivery's traceparent header is continued: its "outbox.consume" span
// is a child of the publisher's span, and the intent it records stores that
// span's trace context with the publisher's tracestate.
func TestConsumerContinuesTraceparentHeader(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	publisher, err := amqpprovider.New(amqpprovider.Config{})
	if err != nil {
		t.Fatal(err)
	}
	registry, err := providers.NewRegistry(publisher)
	if err != nil {
		t.Fatal(err)
	}
	client, err := intents.NewClient(b.pool, &intents.Config{Providers: registry, TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	c, _, _ := b.startWith(client, amqpconsumer.Config{Handler: orderHandler(&calls)})

	const traceID, parentID = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	b.publish("", b.queue, "order-traced", `{"id":"o1","amount":500}`, amqp.Table{
		"traceparent": "00-" + traceID + "-" + parentID + "-01",
		"tracestate":  "rojo=00f067aa0ba902b7",
	})
	b.publish("", b.queue, "order-untraced", `{"id":"o2","amount":700}`, nil)
	testkit.Eventually(t, 20*time.Second, "both messages processed", func() bool { return c.Stats().Processed == 2 })

	var span sdktrace.ReadOnlySpan
	testkit.Eventually(t, 10*time.Second, "the traced message's span", func() bool {
		for _, s := range sr.Ended() {
			for _, kv := range s.Attributes() {
				if kv.Key == "outbox.message_id" && kv.Value.AsString() == "order-traced" {
					span = s
				}
			}
		}
		return span != nil
	})
	if span.Name() != "outbox.consume" || span.SpanContext().TraceID().String() != traceID ||
		span.Parent().SpanID().String() != parentID || !span.Parent().IsRemote() {
		t.Fatalf("span %q in trace %s with parent %v, want a child of the header's span", span.Name(), span.SpanContext().TraceID(), span.Parent())
	}

	var parent, state *string
	if err := b.pool.QueryRow(context.Background(), `SELECT trace_parent, trace_state FROM outbox_intents WHERE message_id = 'order-traced'`).Scan(&parent, &state); err != nil {
		t.Fatal(err)
	}
	want := "00-" + traceID + "-" + span.SpanContext().SpanID().String() + "-01"
	if parent == nil || *parent != want || state == nil || *state != "rojo=00f067aa0ba902b7" {
		t.Fatalf("stored trace context %v %v, want %s rojo=00f067aa0ba902b7", parent, state, want)
	}
	// A message without the header starts a trace of its own.
	if err := b.pool.QueryRow(context.Background(), `SELECT trace_parent FROM outbox_intents WHERE message_id = 'order-untraced'`).Scan(&parent); err != nil {
		t.Fatal(err)
	}
	if parent == nil || len(*parent) != 55 || (*parent)[3:35] == traceID {
		t.Fatalf("untraced message's intent stored %v, want a trace of its own", parent)
	}
}
