package intents_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
)

// batchOrderHandler stores an order per message and records its payment
// and receipt, as orderHandler does for Consume.
func batchOrderHandler(ctx context.Context, tx pgx.Tx, msg intents.Message, rec *intents.Recorder) error {
	return orderHandler("order-"+msg.ID)(ctx, tx, rec)
}

func TestConsumeBatchProcessesEachMessageOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	m := func(id string) intents.Message { return intents.Message{Consumer: "orders", ID: id} }
	ran := 0
	handler := func(ctx context.Context, tx pgx.Tx, msg intents.Message, rec *intents.Recorder) error {
		ran++
		if msg.ID == "no-intents" {
			return nil
		}
		return batchOrderHandler(ctx, tx, msg, rec)
	}

	// m1 twice in one batch: the second is a duplicate.
	res, err := b.client.ConsumeBatch(ctx, []intents.Message{m("m1"), m("m2"), m("m1"), m("no-intents")}, handler)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 4 || res[0].Duplicate || res[1].Duplicate || !res[2].Duplicate || res[3].Duplicate {
		t.Fatalf("results = %+v, want new, new, duplicate, new", res)
	}
	if len(res[0].Intents) != 2 || res[0].Intents[0].Key != "orders:m1:payment" || res[1].Intents[1].Key != "orders:m2:receipt" || len(res[3].Intents) != 0 {
		t.Fatalf("recorded intents = %+v", res)
	}
	if ran != 3 {
		t.Fatalf("handler ran %d times, want 3", ran)
	}
	if got, want := b.counts(t), (counts{markers: 3, orders: 2, intents: 4, events: 4, queued: 4}); got != want {
		t.Fatalf("rows = %+v, want %+v", got, want)
	}

	// Across batches: m2 was processed, m3 is new.
	res, err = b.client.ConsumeBatch(ctx, []intents.Message{m("m2"), m("m3")}, handler)
	if err != nil {
		t.Fatal(err)
	}
	if !res[0].Duplicate || res[0].Intents != nil || res[1].Duplicate || len(res[1].Intents) != 2 {
		t.Fatalf("second batch = %+v, want duplicate then new", res)
	}
	if got, want := b.counts(t), (counts{markers: 4, orders: 3, intents: 6, events: 6, queued: 6}); got != want {
		t.Fatalf("rows = %+v, want %+v", got, want)
	}

	// A message seen by Consume is a duplicate in a batch, and the reverse.
	if _, err := b.client.Consume(ctx, m("m4"), orderHandler("order-m4")); err != nil {
		t.Fatal(err)
	}
	res, err = b.client.ConsumeBatch(ctx, []intents.Message{m("m4")}, handler)
	if err != nil || !res[0].Duplicate {
		t.Fatalf("batch of a consumed message = %+v, %v; want a duplicate", res, err)
	}
	single, err := b.client.Consume(ctx, m("m3"), orderHandler("order-m3"))
	if err != nil || !single.Duplicate {
		t.Fatalf("Consume of a batched message = %+v, %v; want a duplicate", single, err)
	}
}

func TestConsumeBatchRollsBackEverythingOnAnyFailure(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	msgs := []intents.Message{{Consumer: "orders", ID: "a"}, {Consumer: "orders", ID: "b"}, {Consumer: "orders", ID: "c"}}
	boom := errors.New("boom")
	cases := map[string]struct {
		handler intents.BatchHandler
		check   func(error) bool
	}{
		"error": {
			handler: func(ctx context.Context, tx pgx.Tx, msg intents.Message, rec *intents.Recorder) error {
				if msg.ID == "b" {
					return boom
				}
				return batchOrderHandler(ctx, tx, msg, rec)
			},
			check: func(err error) bool { return errors.Is(err, boom) },
		},
		"panic": {
			handler: func(ctx context.Context, tx pgx.Tx, msg intents.Message, rec *intents.Recorder) error {
				if msg.ID == "b" {
					panic("handler bug")
				}
				return batchOrderHandler(ctx, tx, msg, rec)
			},
			check: func(err error) bool { var p *intents.PanicError; return errors.As(err, &p) },
		},
		"refused intent": {
			handler: func(ctx context.Context, tx pgx.Tx, msg intents.Message, rec *intents.Recorder) error {
				if msg.ID == "b" {
					_ = rec.Record(intents.Intent{Kind: sendgridprovider.KindEmail, Payload: map[string]any{"subject": "no recipients"}})
					return nil // ignoring the refusal does not save the batch
				}
				return batchOrderHandler(ctx, tx, msg, rec)
			},
			check: func(err error) bool { return errors.Is(err, intents.ErrInvalidIntent) },
		},
	}
	for name, tc := range cases {
		_, err := b.client.ConsumeBatch(ctx, msgs, tc.handler)
		var batchErr *intents.BatchError
		if !errors.As(err, &batchErr) || batchErr.Index != 1 || batchErr.Message.ID != "b" || !tc.check(err) {
			t.Fatalf("%s: ConsumeBatch = %v, want a *BatchError for message 1 wrapping the cause", name, err)
		}
		if got := b.counts(t); got != (counts{}) {
			t.Fatalf("%s: rows after a failed batch = %+v, want none", name, got)
		}
	}
	// The redelivered batch then succeeds.
	res, err := b.client.ConsumeBatch(ctx, msgs, batchOrderHandler)
	if err != nil || len(res) != 3 || res[1].Duplicate {
		t.Fatalf("redelivery = %+v, %v", res, err)
	}
	if got, want := b.counts(t), (counts{markers: 3, orders: 3, intents: 6, events: 6, queued: 6}); got != want {
		t.Fatalf("rows = %+v, want %+v", got, want)
	}
}

func TestConsumeBatchRefusesInvalidMessagesWithNothingWritten(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ran := false
	_, err := b.client.ConsumeBatch(context.Background(), []intents.Message{{Consumer: "orders", ID: "ok"}, {Consumer: "orders", ID: ""}},
		func(context.Context, pgx.Tx, intents.Message, *intents.Recorder) error { ran = true; return nil })
	var batchErr *intents.BatchError
	if !errors.Is(err, intents.ErrInvalidMessage) || !errors.As(err, &batchErr) || batchErr.Index != 1 || !strings.Contains(err.Error(), "the batch's 2nd message") {
		t.Fatalf("ConsumeBatch = %v, want a *BatchError wrapping ErrInvalidMessage naming message 1", err)
	}
	if ran || b.counts(t) != (counts{}) {
		t.Fatalf("an invalid batch ran its handler or wrote rows")
	}
	if _, err := b.client.ConsumeBatch(context.Background(), nil, nil); err == nil {
		t.Fatal("a nil handler was accepted")
	}
}

// Concurrent batches over the same messages, in different orders, process
// each message exactly once and never fail with a deadlock.
func TestConcurrentOverlappingBatchesProcessEachMessageOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	const messages, batches = 40, 8
	var handled atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, batches)
	for g := range batches {
		msgs := make([]intents.Message, messages)
		for i := range msgs {
			msgs[i] = intents.Message{Consumer: "orders", ID: fmt.Sprint("m", i)}
		}
		rand.New(rand.NewPCG(uint64(g), 7)).Shuffle(len(msgs), func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := b.client.ConsumeBatch(ctx, msgs, batchOrderHandler)
			if err != nil {
				errs <- err
				return
			}
			for _, r := range res {
				if !r.Duplicate {
					handled.Add(1)
				}
			}
		}()
	}
	testkit.WaitWithin(t, &wg, time.Minute)
	close(errs)
	for err := range errs {
		t.Fatalf("ConsumeBatch: %v", err)
	}
	if n := handled.Load(); n != messages {
		t.Fatalf("%d messages reported processed, want %d", n, messages)
	}
	if got, want := b.counts(t), (counts{markers: messages, orders: messages, intents: 2 * messages, events: 2 * messages, queued: 2 * messages}); got != want {
		t.Fatalf("rows = %+v, want %+v", got, want)
	}
}

func TestConsumeBatchTxLeavesCommitToTheCaller(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	msgs := []intents.Message{{Consumer: "orders", ID: "a"}, {Consumer: "orders", ID: "b"}}
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.ConsumeBatchTx(ctx, tx, msgs, batchOrderHandler); err != nil {
		t.Fatal(err)
	}
	_ = tx.Rollback(ctx)
	if got := b.counts(t); got != (counts{}) {
		t.Fatalf("rows after the caller rolled back = %+v", got)
	}
	err = pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		res, err := b.client.ConsumeBatchTx(ctx, tx, msgs, batchOrderHandler)
		if err == nil && (res[0].Duplicate || len(res[1].Intents) != 2) {
			err = fmt.Errorf("results %+v", res)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := b.counts(t), (counts{markers: 2, orders: 2, intents: 4, events: 4, queued: 4}); got != want {
		t.Fatalf("rows = %+v, want %+v", got, want)
	}
}

// Without a TracerProvider no span is recorded, but every message of a
// batch still stores the span context the caller's ctx holds (a broker
// consumer's, say), as Consume does, with each intent's id given back in
// the message's result.
func TestConsumeBatchWithoutTracerStoresTheCallersTraceContext(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(ctx) })
	callerCtx, span := tp.Tracer("broker").Start(ctx, "receive")
	m := func(id string) intents.Message { return intents.Message{Consumer: "orders", ID: id} }
	res, err := b.client.ConsumeBatch(callerCtx, []intents.Message{m("t1"), m("t2")}, batchOrderHandler)
	span.End()
	if err != nil {
		t.Fatal(err)
	}
	want := traceparentOf(sr.Ended()[0])
	got := traceParents(t, b)
	if len(got) != 4 {
		t.Fatalf("%d intents stored, want 4", len(got))
	}
	for key, tp := range got {
		if tp != want {
			t.Errorf("intent %s stored traceparent %q, want the caller's %q", key, tp, want)
		}
	}
	for i, r := range res {
		for _, in := range r.Intents {
			var key string
			if err := b.pool.QueryRow(ctx, `SELECT idempotency_key FROM outbox_intents WHERE id = $1`, in.ID).Scan(&key); err != nil || key != in.Key {
				t.Errorf("message %d: intent id %d holds key %q (%v), want %q", i, in.ID, key, err, in.Key)
			}
		}
	}
}

// A batch whose connection is lost mid-transaction reruns whole, handlers
// included, and writes each message once; a batch whose handler swallowed
// a failed statement is rolled back by its COMMIT, and nothing remains.
func TestConsumeBatchRerunsOnTransientErrorsAndNeverCommitsAFailedTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	msgs := []intents.Message{{Consumer: "orders", ID: "a"}, {Consumer: "orders", ID: "b"}}
	runs := map[string]int{}
	res, err := b.client.ConsumeBatch(ctx, msgs, func(ctx context.Context, tx pgx.Tx, msg intents.Message, rec *intents.Recorder) error {
		runs[msg.ID]++
		if err := batchOrderHandler(ctx, tx, msg, rec); err != nil {
			return err
		}
		if msg.ID == "b" && runs["b"] == 1 {
			// The server kills this backend mid-transaction: a real
			// connection loss before commit.
			_, err := tx.Exec(ctx, `SELECT pg_terminate_backend(pg_backend_pid())`)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatalf("ConsumeBatch = %v, want success after a retry", err)
	}
	if runs["a"] != 2 || runs["b"] != 2 || len(res) != 2 || len(res[0].Intents) != 2 || len(res[1].Intents) != 2 {
		t.Fatalf("handler runs %v, results %+v; want each message run twice and recorded once", runs, res)
	}
	if got, want := b.counts(t), (counts{markers: 2, orders: 2, intents: 4, events: 4, queued: 4}); got != want {
		t.Fatalf("rows = %+v, want %+v", got, want)
	}

	// Whether the message has intents to store or not, the batch learns
	// that its transaction failed when the handler returns, and names it.
	for _, record := range []bool{true, false} {
		_, err = b.client.ConsumeBatch(ctx, []intents.Message{{Consumer: "orders", ID: fmt.Sprint("c-", record)}}, func(ctx context.Context, tx pgx.Tx, msg intents.Message, rec *intents.Recorder) error {
			if _, err := tx.Exec(ctx, `INSERT INTO orders (id, total) VALUES ($1, 1)`, msg.ID); err != nil {
				return err
			}
			_, _ = tx.Exec(ctx, `SELECT 1/0`) // fails the transaction; the handler ignores it
			if record {
				return rec.Record(intents.Intent{Kind: sendgridprovider.KindEmail, Payload: receipt("c@example.com")})
			}
			return nil
		})
		var batchErr *intents.BatchError
		if !errors.As(err, &batchErr) || batchErr.Index != 0 || !errors.Is(err, pgx.ErrTxCommitRollback) {
			t.Fatalf("ConsumeBatch after a swallowed error (intents %v) = %v, want a *BatchError for message 0 wrapping pgx.ErrTxCommitRollback", record, err)
		}
	}
	if got, want := b.counts(t), (counts{markers: 2, orders: 2, intents: 4, events: 4, queued: 4}); got != want {
		t.Fatalf("rows after the failed batch = %+v, want %+v (unchanged)", got, want)
	}
}

// Every failure of one message comes back as a *BatchError naming it,
// whatever finds it: the handler's return, the transaction's state when it
// returns, the payload's bytes, or the intents' statement refusing a key
// that an intent stored before, or one stored earlier in the same
// transaction, holds. Nothing of the batch is written.
func TestConsumeBatchNamesTheFailingMessageWhateverFindsIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	// Stored before: the key message "taken" of consumer "orders" derives
	// for its only intent.
	if err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		_, err := b.client.RecordTx(ctx, tx, intents.Intent{Kind: sendgridprovider.KindEmail, Payload: receipt("x@example.com"), Key: "orders:taken"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	oneReceipt := func(_ context.Context, _ pgx.Tx, _ intents.Message, rec *intents.Recorder) error {
		return rec.Record(intents.Intent{Kind: sendgridprovider.KindEmail, Payload: receipt("a@example.com")})
	}
	m := func(ids ...string) []intents.Message {
		out := make([]intents.Message, len(ids))
		for i, id := range ids {
			out[i] = intents.Message{Consumer: "orders", ID: id}
		}
		return out
	}
	var dupKey *intents.DuplicateKeyError
	cases := map[string]struct {
		msgs    []intents.Message
		handler intents.BatchHandler
		index   int
		check   func(error) bool
	}{
		"key stored before": {
			msgs: m("a", "b", "taken", "c"), handler: oneReceipt, index: 2,
			check: func(err error) bool { return errors.As(err, &dupKey) && dupKey.Key == "orders:taken" },
		},
		"key stored earlier in the batch": {
			// a's handler stores, with RecordTx in the batch's transaction,
			// the key c derives; c's intent is refused when stored.
			msgs: m("a", "b", "c"),
			handler: func(ctx context.Context, tx pgx.Tx, msg intents.Message, rec *intents.Recorder) error {
				if msg.ID == "a" {
					if _, err := b.client.RecordTx(ctx, tx, intents.Intent{Kind: sendgridprovider.KindEmail, Payload: receipt("y@example.com"), Key: "orders:c"}); err != nil {
						return err
					}
				}
				return oneReceipt(ctx, tx, msg, rec)
			},
			index: 2,
			check: func(err error) bool { return errors.As(err, &dupKey) && dupKey.Key == "orders:c" },
		},
		"a swallowed failed statement": {
			msgs: m("a", "b", "c"),
			handler: func(ctx context.Context, tx pgx.Tx, msg intents.Message, rec *intents.Recorder) error {
				if msg.ID == "b" {
					_, _ = tx.Exec(ctx, `SELECT 1/0`)
				}
				return oneReceipt(ctx, tx, msg, rec)
			},
			index: 1,
			check: func(err error) bool { return errors.Is(err, pgx.ErrTxCommitRollback) },
		},
		"a number jsonb cannot store": {
			msgs: m("a", "b", "c"),
			handler: func(ctx context.Context, tx pgx.Tx, msg intents.Message, rec *intents.Recorder) error {
				if msg.ID == "c" {
					return rec.Record(intents.Intent{Kind: sendgridprovider.KindEmail, Payload: json.RawMessage(`{"from": {"email": "shop@example.com"}, "to": [{"email": "a@example.com"}], "subject": "s", "text": "t", "send_at": 1e1000000}`)})
				}
				return oneReceipt(ctx, tx, msg, rec)
			},
			index: 2,
			check: func(err error) bool {
				return errors.Is(err, intents.ErrInvalidIntent) && strings.Contains(err.Error(), `"send_at"`)
			},
		},
		"an invalid message": {
			msgs: append(m("a"), intents.Message{Consumer: "orders", ID: "bad\x00id"}), handler: oneReceipt, index: 1,
			check: func(err error) bool { return errors.Is(err, intents.ErrInvalidMessage) },
		},
	}
	before := b.counts(t)
	for name, tc := range cases {
		for _, inTx := range []bool{false, true} {
			var err error
			if inTx {
				err = pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
					_, err := b.client.ConsumeBatchTx(ctx, tx, tc.msgs, tc.handler)
					return err
				})
			} else {
				_, err = b.client.ConsumeBatch(ctx, tc.msgs, tc.handler)
			}
			var batchErr *intents.BatchError
			if !errors.As(err, &batchErr) || batchErr.Index != tc.index || batchErr.Message != tc.msgs[tc.index] || !tc.check(err) {
				t.Errorf("%s (ConsumeBatchTx %v) = %v, want a *BatchError for message %d wrapping the cause", name, inTx, err, tc.index)
			}
			if got := b.counts(t); got != before {
				t.Errorf("%s (ConsumeBatchTx %v): rows %+v after the failed batch, want %+v", name, inTx, got, before)
			}
		}
	}
}
