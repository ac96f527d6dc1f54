package dispatcher_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
)

// upstream is a trace a publisher started, as a message's traceparent
// header carries it.
const upstream = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func upstreamContext(t *testing.T) context.Context {
	t.Helper()
	ctx := propagation.TraceContext{}.Extract(context.Background(),
		propagation.MapCarrier{"traceparent": upstream, "tracestate": "vendor=a1"})
	if !trace.SpanContextFromContext(ctx).IsValid() {
		t.Fatal("upstream traceparent does not parse")
	}
	return ctx
}

// endedSpans waits until the recorder holds a span named name, and returns
// every span it holds.
func endedSpans(t *testing.T, sr *tracetest.SpanRecorder, name string) []sdktrace.ReadOnlySpan {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		spans := sr.Ended()
		for _, s := range spans {
			if s.Name() == name {
				return spans
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no span %q ended within 10s; have %d spans", name, len(spans))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func spanNamed(t *testing.T, spans []sdktrace.ReadOnlySpan, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	for _, s := range spans {
		if s.Name() == name {
			return s
		}
	}
	t.Fatalf("no span %q", name)
	return nil
}

func attr(s sdktrace.ReadOnlySpan, key string) attribute.Value {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// A message consumed under a publisher's trace records its intent in an
// "outbox.consume" span of that trace; the dispatcher's attempt span, under
// River's work span, links to the consumer's span, and carries the attempt's
// outcome but nothing of the payload.
func TestAttemptSpanLinksToConsumerSpan(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	rec, err := intents.NewClient(b.pool, &intents.Config{Providers: b.registry, TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	res, err := rec.Consume(upstreamContext(t), intents.Message{Consumer: "billing", ID: "order-1"},
		func(ctx context.Context, tx pgx.Tx, r *intents.Recorder) error {
			return r.Record(intents.Intent{Kind: sendgridprovider.KindEmail, Payload: json.RawMessage(emailPayload)})
		})
	if err != nil {
		t.Fatal(err)
	}
	id := res.Intents[0].ID

	cfg := b.config()
	cfg.TracerProvider = tp
	b.start(t, cfg)
	if s := b.waitSettled(t, id); s.State != intenttype.StateSucceeded {
		t.Fatalf("intent = %+v, want succeeded", s)
	}
	spans := endedSpans(t, sr, "outbox.dispatch "+sendgridprovider.KindEmail)

	consume := spanNamed(t, spans, "outbox.consume")
	if got := consume.SpanContext().TraceID().String(); got != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Fatalf("consumer span in trace %s, want the publisher's", got)
	}
	if consume.Parent().SpanID().String() != "00f067aa0ba902b7" || !consume.Parent().IsRemote() {
		t.Fatalf("consumer span's parent = %v, want the publisher's span", consume.Parent())
	}
	if attr(consume, "outbox.consumer").AsString() != "billing" || attr(consume, "outbox.message_id").AsString() != "order-1" ||
		attr(consume, "outbox.intents").AsInt64() != 1 {
		t.Fatalf("consumer span attributes = %v", consume.Attributes())
	}

	var stored string
	if err := b.pool.QueryRow(context.Background(), `SELECT trace_parent || ' ' || trace_state FROM outbox_intents WHERE id = $1`, id).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	want := "00-" + consume.SpanContext().TraceID().String() + "-" + consume.SpanContext().SpanID().String() + "-01 vendor=a1"
	if stored != want {
		t.Fatalf("stored trace context %q, want %q", stored, want)
	}

	attempt := spanNamed(t, spans, "outbox.dispatch "+sendgridprovider.KindEmail)
	links := attempt.Links()
	if len(links) != 1 || links[0].SpanContext.TraceID() != consume.SpanContext().TraceID() ||
		links[0].SpanContext.SpanID() != consume.SpanContext().SpanID() {
		t.Fatalf("attempt span links = %+v, want the consumer span %v", links, consume.SpanContext())
	}
	if attempt.SpanContext().TraceID() == consume.SpanContext().TraceID() {
		t.Fatal("attempt span shares the consumer's trace; it should only link to it")
	}
	if attr(attempt, "outbox.intent.id").AsInt64() != id || attr(attempt, "outbox.intent.kind").AsString() != sendgridprovider.KindEmail ||
		attr(attempt, "outbox.provider").AsString() != "sendgrid" || attr(attempt, "outbox.attempt").AsInt64() != 1 ||
		attr(attempt, "outbox.outcome").AsString() != "succeeded" || attempt.Status().Code == codes.Error {
		t.Fatalf("attempt span attributes = %v, status %v", attempt.Attributes(), attempt.Status())
	}
	// The queue claimed it: the attempt is a root span of its own trace
	// (a River job's attempt is a child of River's work span).
	if attempt.Parent().IsValid() {
		t.Fatalf("attempt span's parent = %v, want none: the queue's attempt starts its trace", attempt.Parent())
	}
	for _, s := range spans {
		for _, kv := range s.Attributes() {
			if strings.Contains(kv.Value.String(), "buyer@example.com") || strings.Contains(kv.Value.String(), "Receipt") {
				t.Fatalf("span %q carries the payload: %v", s.Name(), kv)
			}
		}
	}
}

// A failed attempt records its error on the span.
func TestAttemptSpanRecordsRefusal(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	id := b.record(t, "stripe.payment_intent", declinedPayload)
	cfg := b.config()
	cfg.TracerProvider = tp
	b.start(t, cfg)
	if s := b.waitSettled(t, id); s.State != intenttype.StateFailed {
		t.Fatalf("intent = %+v, want failed", s)
	}
	attempt := spanNamed(t, endedSpans(t, sr, "outbox.dispatch stripe.payment_intent"), "outbox.dispatch stripe.payment_intent")
	if attempt.Status().Code != codes.Error || len(attempt.Events()) == 0 || attr(attempt, "outbox.outcome").AsString() != "failed" {
		t.Fatalf("attempt span status %v, events %v, attributes %v; want the refusal recorded", attempt.Status(), attempt.Events(), attempt.Attributes())
	}
	if len(attempt.Links()) != 0 {
		t.Fatalf("an intent recorded outside any trace has links %v", attempt.Links())
	}
}

// With no TracerProvider nothing of the outbox's is traced and nothing
// fails; a caller's span context in ctx is still stored with the intent,
// and none is stored as NULL.
func TestNoTracerProviderRecordsNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	sr := tracetest.NewSpanRecorder()
	callerTP := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = callerTP.Shutdown(context.Background()) })
	ctx, caller := callerTP.Tracer("caller").Start(context.Background(), "caller")
	res, err := b.recorder.Consume(ctx, intents.Message{Consumer: "billing", ID: "traced"},
		func(ctx context.Context, tx pgx.Tx, r *intents.Recorder) error {
			return r.Record(intents.Intent{Kind: sendgridprovider.KindEmail, Payload: json.RawMessage(emailPayload)})
		})
	caller.End()
	if err != nil {
		t.Fatal(err)
	}
	traced := res.Intents[0].ID
	untraced := b.record(t, sendgridprovider.KindEmail, emailPayload)
	b.start(t, b.config())
	for _, id := range []int64{traced, untraced} {
		if s := b.waitSettled(t, id); s.State != intenttype.StateSucceeded {
			t.Fatalf("intent %d = %+v, want succeeded", id, s)
		}
	}
	var tracedParent, untracedParent *string
	if err := b.pool.QueryRow(context.Background(), `SELECT (SELECT trace_parent FROM outbox_intents WHERE id = $1), (SELECT trace_parent FROM outbox_intents WHERE id = $2)`,
		traced, untraced).Scan(&tracedParent, &untracedParent); err != nil {
		t.Fatal(err)
	}
	if want := "00-" + caller.SpanContext().TraceID().String() + "-" + caller.SpanContext().SpanID().String() + "-01"; tracedParent == nil || *tracedParent != want {
		t.Fatalf("stored traceparent %v, want the caller's %s", tracedParent, want)
	}
	if untracedParent != nil {
		t.Fatalf("an untraced intent stored traceparent %q, want NULL", *untracedParent)
	}
	if spans := sr.Ended(); len(spans) != 1 || spans[0].Name() != "caller" {
		t.Fatalf("recorded %d spans, want only the caller's own", len(spans))
	}
}
