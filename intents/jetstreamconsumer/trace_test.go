package jetstreamconsumer_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox/intents/jetstreamconsumer"
	"github.com/outboxkit/outbox/internal/testkit"
)

// A message's traceparent and tracestate headers reach the intents it
// records, even with no TracerProvider: the no-op tracer passes the
// publisher's span context on, and nothing fails.
func TestConsumerCarriesTraceparentHeader(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	const traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	msg := nats.NewMsg(b.subject)
	msg.Data = []byte(`{"order": "traced"}`)
	msg.Header.Set(jetstream.MsgIDHeader, "traced")
	msg.Header.Set("Traceparent", traceparent) // any case
	msg.Header.Add("tracestate", "rojo=00f067aa0ba902b7")
	msg.Header.Add("tracestate", "congo=t61rcWkgMzE")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := b.js.PublishMsg(ctx, msg); err != nil {
		t.Fatal(err)
	}
	c, err := jetstreamconsumer.New(b.client, b.config(b.recordingHandler()))
	if err != nil {
		t.Fatal(err)
	}
	run(t, c)
	testkit.Eventually(t, 20*time.Second, "the message to be processed", b.consumerSettled(t, 1))
	var parent, state *string
	if err := b.pool.QueryRow(context.Background(), `SELECT trace_parent, trace_state FROM outbox_intents WHERE message_id = 'traced'`).Scan(&parent, &state); err != nil {
		t.Fatal(err)
	}
	if parent == nil || *parent != traceparent || state == nil || *state != "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE" {
		t.Fatalf("stored trace context %v %v, want the headers'", parent, state)
	}
}
