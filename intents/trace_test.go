package intents_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
)

func tracedClient(t *testing.T, b *testBundle) (*intents.Client, *tracetest.SpanRecorder) {
	t.Helper()
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	c, err := intents.NewClient(b.pool, &intents.Config{Providers: testRegistry(t), TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	return c, sr
}

// traceParents returns each stored intent's traceparent by key ("" for
// NULL).
func traceParents(t *testing.T, b *testBundle) map[string]string {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `SELECT idempotency_key, coalesce(trace_parent, '') FROM outbox_intents`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	var k, v string
	if _, err := pgx.ForEachRow(rows, []any{&k, &v}, func() error { out[k] = v; return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

func traceparentOf(s sdktrace.ReadOnlySpan) string {
	return "00-" + s.SpanContext().TraceID().String() + "-" + s.SpanContext().SpanID().String() + "-01"
}

// Each message of a batch records its intents in an "outbox.consume" span
// of its own, under the batch's span; a failing message's span records the
// error.
func TestConsumeBatchTracesEachMessage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c, sr := tracedClient(t, b)
	m := func(id string) intents.Message { return intents.Message{Consumer: "orders", ID: id} }
	if _, err := c.ConsumeBatch(context.Background(), []intents.Message{m("m1"), m("m2"), m("m1")}, batchOrderHandler); err != nil {
		t.Fatal(err)
	}
	spans := map[string]sdktrace.ReadOnlySpan{}
	var batch sdktrace.ReadOnlySpan
	for _, s := range sr.Ended() {
		switch s.Name() {
		case "outbox.consume_batch":
			batch = s
		case "outbox.consume":
			for _, kv := range s.Attributes() {
				if kv.Key == "outbox.message_id" && spans[kv.Value.AsString()] == nil {
					spans[kv.Value.AsString()] = s
				}
			}
		}
	}
	if batch == nil || spans["m1"] == nil || spans["m2"] == nil || len(sr.Ended()) != 4 {
		t.Fatalf("spans: batch %v, messages %v, %d in all; want a batch span and one per message", batch, spans, len(sr.Ended()))
	}
	for id, s := range spans {
		if s.Parent().SpanID() != batch.SpanContext().SpanID() {
			t.Fatalf("message %s's span is not the batch span's child", id)
		}
	}
	got := traceParents(t, b)
	for _, id := range []string{"m1", "m2"} {
		for _, name := range []string{"payment", "receipt"} {
			if k := "orders:" + id + ":" + name; got[k] != traceparentOf(spans[id]) {
				t.Fatalf("intent %s stored %q, want its message's span %q", k, got[k], traceparentOf(spans[id]))
			}
		}
	}

	sr2 := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr2))
	c2, err := intents.NewClient(b.pool, &intents.Config{Providers: testRegistry(t), TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	_, err = c2.ConsumeBatch(context.Background(), []intents.Message{m("m3")}, func(context.Context, pgx.Tx, intents.Message, *intents.Recorder) error { return boom })
	if !errors.Is(err, boom) {
		t.Fatalf("ConsumeBatch = %v, want boom", err)
	}
	for _, s := range sr2.Ended() {
		if s.Status().Code != codes.Error {
			t.Fatalf("span %q status %v after a failed batch, want an error", s.Name(), s.Status())
		}
	}
}

// RecordTx stores the caller's span context; without one, NULL.
func TestRecordTxStoresTheCallersTraceContext(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c, sr := tracedClient(t, b)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	ctx, span := tp.Tracer("app").Start(context.Background(), "create note")
	record := func(ctx context.Context, key string) {
		tx, err := b.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if _, err := c.RecordTx(ctx, tx, intents.Intent{Kind: sendgridprovider.KindEmail, Key: key, Payload: receipt("a@example.com")}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	record(ctx, "traced")
	span.End()
	record(context.Background(), "untraced")
	got := traceParents(t, b)
	if got["traced"] != traceparentOf(sr.Ended()[0]) || got["untraced"] != "" {
		t.Fatalf("stored traceparents %v, want the caller's span and none", got)
	}
}
