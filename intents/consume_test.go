package intents_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/internal/testkit/fixture"
	"github.com/outboxkit/outbox/internal/testkit/pgtest"
	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
	"github.com/outboxkit/outbox/providers/stripeprovider"
)

type testBundle struct {
	pool   *pgxpool.Pool
	client *intents.Client
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	pool, _ := pgtest.NewDB(t)
	if _, err := pool.Exec(context.Background(), `CREATE TABLE orders (id text PRIMARY KEY, total bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	client, err := intents.NewClient(pool, &intents.Config{Providers: testRegistry(t)})
	if err != nil {
		t.Fatal(err)
	}
	return &testBundle{pool: pool, client: client}
}

func testRegistry(t testing.TB) *providers.Registry { return fixture.Registry(t) }

func payment(amount int) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"amount": %d, "currency": "usd", "customer": "cus_1", "payment_method": "pm_card_visa", "confirm": true}`, amount))
}

func receipt(to string) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"from": {"email": "shop@example.com"}, "to": [{"email": %q}], "subject": "Your receipt", "text": "Thanks"}`, to))
}

// orderHandler is a typical consumer: one business write, two intents.
func orderHandler(orderID string) intents.Handler {
	return func(ctx context.Context, tx pgx.Tx, rec *intents.Recorder) error {
		if _, err := tx.Exec(ctx, `INSERT INTO orders (id, total) VALUES ($1, 500)`, orderID); err != nil {
			return err
		}
		if err := rec.Record(intents.Intent{Kind: stripeprovider.KindPaymentIntent, Name: "payment", Payload: payment(500), Reference: orderID}); err != nil {
			return err
		}
		return rec.Record(intents.Intent{Kind: sendgridprovider.KindEmail, Name: "receipt", Payload: receipt("buyer@example.com"), Reference: orderID})
	}
}

type counts struct{ markers, orders, intents, events, queued int }

func (b *testBundle) counts(t *testing.T) counts {
	t.Helper()
	var c counts
	err := b.pool.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM outbox_processed_messages),
		(SELECT count(*) FROM orders),
		(SELECT count(*) FROM outbox_intents),
		(SELECT count(*) FROM outbox_intent_events),
		(SELECT count(*) FROM outbox_intents WHERE queued)`).Scan(&c.markers, &c.orders, &c.intents, &c.events, &c.queued)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestConsumeRecordsEverythingInOneTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	msg := intents.Message{Consumer: "orders", ID: "msg-1"}
	res, err := b.client.Consume(ctx, msg, orderHandler("order-1"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Duplicate || len(res.Intents) != 2 {
		t.Fatalf("Consume = %+v, want two intents", res)
	}
	if res.Intents[0].Key != "orders:msg-1:payment" || res.Intents[1].Key != "orders:msg-1:receipt" {
		t.Fatalf("keys = %q, %q", res.Intents[0].Key, res.Intents[1].Key)
	}
	if got, want := b.counts(t), (counts{markers: 1, orders: 1, intents: 2, events: 2, queued: 2}); got != want {
		t.Fatalf("rows = %+v, want %+v", got, want)
	}
	var provider, state, reference string
	if err := b.pool.QueryRow(ctx, `SELECT provider, state, reference FROM outbox_intents WHERE id = $1`, res.Intents[0].ID).Scan(&provider, &state, &reference); err != nil {
		t.Fatal(err)
	}
	if provider != "stripe" || state != "pending" || reference != "order-1" {
		t.Fatalf("stored intent: provider %q state %q reference %q", provider, state, reference)
	}
}

func TestSingleIntentKeyIsTheMessage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res, err := b.client.Consume(context.Background(), intents.Message{Consumer: "mailer", ID: "m-7"},
		func(ctx context.Context, tx pgx.Tx, rec *intents.Recorder) error {
			return rec.Record(intents.Intent{Kind: sendgridprovider.KindEmail, Payload: receipt("a@example.com")})
		})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Intents[0].Key; got != "mailer:m-7" {
		t.Fatalf("key = %q, want mailer:m-7", got)
	}
}

func TestSequentialDuplicateRunsNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	msg := intents.Message{Consumer: "orders", ID: "msg-1"}
	if _, err := b.client.Consume(ctx, msg, orderHandler("order-1")); err != nil {
		t.Fatal(err)
	}
	ran := false
	res, err := b.client.Consume(ctx, msg, func(ctx context.Context, tx pgx.Tx, rec *intents.Recorder) error {
		ran = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Duplicate || ran {
		t.Fatalf("redelivery: Duplicate=%v, handler ran=%v; want a duplicate that runs nothing", res.Duplicate, ran)
	}
	if got, want := b.counts(t), (counts{markers: 1, orders: 1, intents: 2, events: 2, queued: 2}); got != want {
		t.Fatalf("rows = %+v, want %+v", got, want)
	}
	// Another consumer of the same message processes it independently.
	res, err = b.client.Consume(ctx, intents.Message{Consumer: "analytics", ID: "msg-1"}, func(ctx context.Context, tx pgx.Tx, rec *intents.Recorder) error {
		return rec.Record(intents.Intent{Kind: sendgridprovider.KindEmail, Payload: receipt("a@example.com")})
	})
	if err != nil || res.Duplicate {
		t.Fatalf("second consumer: %+v, %v", res, err)
	}
}

func TestConcurrentDuplicatesProduceOneEffectSet(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	const deliveries = 64
	msg := intents.Message{Consumer: "orders", ID: "msg-concurrent"}
	var (
		wg         sync.WaitGroup
		mu         sync.Mutex
		processed  int
		duplicates int
		errs       []error
	)
	start := make(chan struct{})
	for range deliveries {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res, err := b.client.Consume(ctx, msg, orderHandler("order-c"))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				errs = append(errs, err)
			case res.Duplicate:
				duplicates++
			default:
				processed++
			}
		}()
	}
	close(start)
	testkit.WaitWithin(t, &wg, time.Minute)
	if len(errs) > 0 {
		t.Fatalf("%d deliveries failed, first: %v", len(errs), errs[0])
	}
	if processed != 1 || duplicates != deliveries-1 {
		t.Fatalf("processed %d, duplicates %d; want 1 and %d", processed, duplicates, deliveries-1)
	}
	if got, want := b.counts(t), (counts{markers: 1, orders: 1, intents: 2, events: 2, queued: 2}); got != want {
		t.Fatalf("rows = %+v, want %+v", got, want)
	}
}

func TestHandlerErrorRollsEverythingBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	msg := intents.Message{Consumer: "orders", ID: "msg-1"}
	boom := errors.New("inventory service unavailable")
	_, err := b.client.Consume(ctx, msg, func(ctx context.Context, tx pgx.Tx, rec *intents.Recorder) error {
		if err := orderHandler("order-1")(ctx, tx, rec); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Consume = %v, want the handler's error", err)
	}
	if got := b.counts(t); got != (counts{}) {
		t.Fatalf("rows after a failed handler = %+v, want none", got)
	}
	res, err := b.client.Consume(ctx, msg, orderHandler("order-1"))
	if err != nil || res.Duplicate || len(res.Intents) != 2 {
		t.Fatalf("redelivery after failure = %+v, %v; want processed", res, err)
	}
}

func TestHandlerPanicRollsEverythingBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	msg := intents.Message{Consumer: "orders", ID: "msg-1"}
	_, err := b.client.Consume(ctx, msg, func(ctx context.Context, tx pgx.Tx, rec *intents.Recorder) error {
		if err := orderHandler("order-1")(ctx, tx, rec); err != nil {
			return err
		}
		panic("nil map")
	})
	var panicErr *intents.PanicError
	if !errors.As(err, &panicErr) || panicErr.Value != "nil map" || len(panicErr.Stack) == 0 {
		t.Fatalf("Consume = %v, want a *PanicError with the value and a stack", err)
	}
	if got := b.counts(t); got != (counts{}) {
		t.Fatalf("rows after a panic = %+v, want none", got)
	}
	if res, err := b.client.Consume(ctx, msg, orderHandler("order-1")); err != nil || res.Duplicate {
		t.Fatalf("redelivery after panic = %+v, %v", res, err)
	}
}

func TestBadIntentsAreRefusedWithNothingWritten(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	oversize := fmt.Sprintf(`{"from": {"email": "shop@example.com"}, "to": [{"email": "a@example.com"}], "subject": "s", "text": %q}`, strings.Repeat("x", intents.DefaultMaxPayloadBytes))
	cases := []struct {
		name    string
		intents []intents.Intent
		is      error
		want    string
	}{
		{"bad payload field", []intents.Intent{{Kind: stripeprovider.KindPaymentIntent, Payload: json.RawMessage(`{"amount": -5, "currency": "usd"}`)}}, intents.ErrInvalidIntent, `field "amount"`},
		{"unknown field", []intents.Intent{{Kind: stripeprovider.KindPaymentIntent, Payload: json.RawMessage(`{"amount": 5, "currency": "usd", "amout": 1}`)}}, intents.ErrInvalidIntent, `"amout"`},
		{"unknown kind", []intents.Intent{{Kind: "fax.send", Payload: json.RawMessage(`{}`)}}, providers.ErrUnknownKind, `"fax.send"`},
		{"oversize payload", []intents.Intent{{Kind: sendgridprovider.KindEmail, Payload: json.RawMessage(oversize)}}, intents.ErrPayloadTooLarge, "limit is 65536"},
		{"not JSON", []intents.Intent{{Kind: sendgridprovider.KindEmail, Payload: []byte("{nope")}}, intents.ErrInvalidIntent, "not valid JSON"},
		{"missing payload", []intents.Intent{{Kind: sendgridprovider.KindEmail}}, intents.ErrInvalidIntent, "payload is required"},
		{"unnamed siblings", []intents.Intent{{Kind: sendgridprovider.KindEmail, Payload: receipt("a@example.com")}, {Kind: sendgridprovider.KindEmail, Payload: receipt("b@example.com")}}, intents.ErrInvalidIntent, "must name each one"},
		{"same name twice", []intents.Intent{{Kind: sendgridprovider.KindEmail, Name: "x", Payload: receipt("a@example.com")}, {Kind: sendgridprovider.KindEmail, Name: "x", Payload: receipt("b@example.com")}}, intents.ErrInvalidIntent, "used by another intent"},
		{"key in a consumer", []intents.Intent{{Kind: sendgridprovider.KindEmail, Key: "mine", Payload: receipt("a@example.com")}}, intents.ErrInvalidIntent, "derived from the message"},
		{"bad name", []intents.Intent{{Kind: sendgridprovider.KindEmail, Name: "has space", Payload: receipt("a@example.com")}}, intents.ErrInvalidIntent, "name"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			msg := intents.Message{Consumer: "orders", ID: fmt.Sprintf("bad-%d", i)}
			_, err := b.client.Consume(ctx, msg, func(ctx context.Context, tx pgx.Tx, rec *intents.Recorder) error {
				if _, err := tx.Exec(ctx, `INSERT INTO orders (id, total) VALUES ($1, 1)`, msg.ID); err != nil {
					return err
				}
				for _, in := range tc.intents {
					// A handler that ignores Record's error must still fail.
					_ = rec.Record(in)
				}
				return nil
			})
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Consume = %v; want errors.Is %v and text containing %q", err, tc.is, tc.want)
			}
		})
	}
	if got := b.counts(t); got != (counts{}) {
		t.Fatalf("rows after refused intents = %+v, want none", got)
	}
	var payloadErr *providers.PayloadError
	_, err := b.client.Consume(ctx, intents.Message{Consumer: "orders", ID: "field"}, func(ctx context.Context, tx pgx.Tx, rec *intents.Recorder) error {
		return rec.Record(intents.Intent{Kind: sendgridprovider.KindEmail, Payload: json.RawMessage(`{"from": {"email": "shop@example.com"}, "to": [], "subject": "s", "text": "t"}`)})
	})
	if !errors.As(err, &payloadErr) || payloadErr.Field != "to" {
		t.Fatalf("Consume = %v, want a *providers.PayloadError naming field to", err)
	}
}

func TestInvalidMessagesAreRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	noop := func(ctx context.Context, tx pgx.Tx, rec *intents.Recorder) error { return nil }
	for _, msg := range []intents.Message{
		{Consumer: "orders", ID: ""},
		{Consumer: "", ID: "m"},
		{Consumer: "has space", ID: "m"},
		{Consumer: "orders", ID: strings.Repeat("x", intents.MaxMessageIDLength+1)},
		{Consumer: "orders", ID: "line\nbreak"},
	} {
		if _, err := b.client.Consume(context.Background(), msg, noop); !errors.Is(err, intents.ErrInvalidMessage) {
			t.Errorf("Consume(%+v) = %v, want ErrInvalidMessage", msg, err)
		}
	}
	if got := b.counts(t); got != (counts{}) {
		t.Fatalf("rows = %+v, want none", got)
	}
}

func TestTransientErrorRerunsTheWholeTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	runs := 0
	res, err := b.client.Consume(ctx, intents.Message{Consumer: "orders", ID: "msg-1"}, func(ctx context.Context, tx pgx.Tx, rec *intents.Recorder) error {
		runs++
		if err := orderHandler("order-1")(ctx, tx, rec); err != nil {
			return err
		}
		if runs == 1 {
			// The server kills this backend mid-transaction: a real
			// connection loss before commit.
			_, err := tx.Exec(ctx, `SELECT pg_terminate_backend(pg_backend_pid())`)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Consume = %v, want success after a retry", err)
	}
	if runs != 2 || len(res.Intents) != 2 {
		t.Fatalf("handler ran %d times, recorded %d intents; want 2 and 2", runs, len(res.Intents))
	}
	if got, want := b.counts(t), (counts{markers: 1, orders: 1, intents: 2, events: 2, queued: 2}); got != want {
		t.Fatalf("rows = %+v, want %+v", got, want)
	}
}

func TestRecordTxUsesTheCallersTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	note := intents.Intent{Kind: sendgridprovider.KindEmail, Payload: receipt("a@example.com"), Key: "note-1-created"}

	// Rolled back: nothing remains.
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.RecordTx(ctx, tx, note); err != nil {
		t.Fatal(err)
	}
	_ = tx.Rollback(ctx)
	if got := b.counts(t); got != (counts{}) {
		t.Fatalf("rows after rollback = %+v", got)
	}

	err = pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO orders (id, total) VALUES ('note-1', 0)`); err != nil {
			return err
		}
		recorded, err := b.client.RecordTx(ctx, tx, note, intents.Intent{Kind: sendgridprovider.KindEmail, Payload: receipt("b@example.com")})
		if err != nil {
			return err
		}
		if recorded[0].Key != "note-1-created" || !strings.HasPrefix(recorded[1].Key, "outbox-") {
			return fmt.Errorf("keys %q, %q", recorded[0].Key, recorded[1].Key)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := b.counts(t), (counts{orders: 1, intents: 2, events: 2, queued: 2}); got != want {
		t.Fatalf("rows = %+v, want %+v", got, want)
	}

	// The same key again is refused, and the transaction must roll back.
	err = pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		_, err := b.client.RecordTx(ctx, tx, note)
		return err
	})
	var dupErr *intents.DuplicateKeyError
	if !errors.As(err, &dupErr) || dupErr.Key != "note-1-created" || !errors.Is(err, intents.ErrDuplicateKey) {
		t.Fatalf("recording a taken key = %v, want a *DuplicateKeyError naming it", err)
	}
}

func TestConsumeTxLeavesCommitToTheCaller(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	msg := intents.Message{Consumer: "orders", ID: "msg-1"}
	for range 2 {
		err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			_, err := b.client.ConsumeTx(ctx, tx, msg, orderHandler("order-1"))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if got, want := b.counts(t), (counts{markers: 1, orders: 1, intents: 2, events: 2, queued: 2}); got != want {
		t.Fatalf("rows = %+v, want %+v", got, want)
	}
}

func TestNewClientValidatesConfig(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t)
	if _, err := intents.NewClient(pool, nil); err == nil || !strings.Contains(err.Error(), "Config") {
		t.Errorf("nil config: %v", err)
	}
	if _, err := intents.NewClient(pool, &intents.Config{}); err == nil || !strings.Contains(err.Error(), "Providers") {
		t.Errorf("no providers: %v", err)
	}
	if _, err := intents.NewClient(pool, &intents.Config{Providers: testRegistry(t), MaxPayloadBytes: -1}); err == nil || !strings.Contains(err.Error(), "MaxPayloadBytes") {
		t.Errorf("negative MaxPayloadBytes: %v", err)
	}
}

func TestTransientRetriesAreBounded(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t)
	client, err := intents.NewClient(pool, &intents.Config{Providers: testRegistry(t), MaxTxAttempts: 3, TxRetryDelay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	serializationFailure := &pgconn.PgError{Code: "40001", Message: "could not serialize access"}
	_, err = client.Consume(context.Background(), intents.Message{Consumer: "orders", ID: "m"}, func(ctx context.Context, tx pgx.Tx, rec *intents.Recorder) error {
		runs++
		return serializationFailure
	})
	if !errors.Is(err, serializationFailure) {
		t.Fatalf("Consume = %v, want the serialization failure after retries", err)
	}
	if runs != 3 {
		t.Fatalf("handler ran %d times, want MaxTxAttempts = 3", runs)
	}
	var markers int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox_processed_messages`).Scan(&markers); err != nil {
		t.Fatal(err)
	}
	if markers != 0 {
		t.Fatalf("%d markers left by a failed message", markers)
	}
}

// Distinct messages never collide on keys, and every message valid by the
// package's limits is recorded (DESIGN.md, invariant 2): "orders" + m1 with
// an intent named receipt beside message m1:receipt with one intent, and
// the longest consumer name with the longest message id.
func TestDistinctMessagesNeverCollideOnKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	one := func(msg intents.Message, names ...string) []intents.Recorded {
		t.Helper()
		res, err := b.client.Consume(ctx, msg, func(ctx context.Context, tx pgx.Tx, rec *intents.Recorder) error {
			for _, n := range names {
				if err := rec.Record(intents.Intent{Kind: sendgridprovider.KindEmail, Name: n, Payload: receipt("a@example.com")}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil || res.Duplicate {
			t.Fatalf("Consume(%+v) = %+v, %v", msg, res, err)
		}
		return res.Intents
	}
	a := one(intents.Message{Consumer: "orders", ID: "m1"}, "receipt", "invoice")
	c := one(intents.Message{Consumer: "orders", ID: "m1:receipt"}, "")
	long := one(intents.Message{Consumer: strings.Repeat("c", intents.MaxConsumerLength), ID: strings.Repeat(":", intents.MaxMessageIDLength)}, "")
	keys := map[string]bool{}
	for _, r := range append(append(a, c...), long...) {
		if keys[r.Key] || len(r.Key) > 255 {
			t.Fatalf("key %q (%d bytes) repeated or too long", r.Key, len(r.Key))
		}
		keys[r.Key] = true
	}
	var n int
	if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM outbox_intents`).Scan(&n); err != nil || n != 4 {
		t.Fatalf("%d intents stored (%v), want 4", n, err)
	}
}

// The marker, the business writes and the intents are one transaction:
// when the intents' insert fails, neither the marker nor the business row
// remains (intents written after COMMIT would leave both), and when the
// transaction fails at COMMIT, no intent remains (intents written through
// the pool, outside the transaction, would).
func TestIntentsShareTheConsumersTransaction(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := setup(t)
	counts := func() (markers, orders, stored int) {
		t.Helper()
		if err := b.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM outbox_processed_messages), (SELECT count(*) FROM orders),
			(SELECT count(*) FROM outbox_intents)`).Scan(&markers, &orders, &stored); err != nil {
			t.Fatal(err)
		}
		return
	}
	handler := func(ctx context.Context, tx pgx.Tx, rec *intents.Recorder) error {
		if _, err := tx.Exec(ctx, `INSERT INTO orders (id, total) VALUES ('o-1', 500)`); err != nil {
			return err
		}
		return rec.Record(intents.Intent{Kind: sendgridprovider.KindEmail, Payload: receipt("a@example.com")})
	}

	// The intents' insert fails.
	if _, err := b.pool.Exec(ctx, `
		CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'refused by test'; END $$;
		CREATE TRIGGER refuse_intents BEFORE INSERT ON outbox_intents FOR EACH ROW EXECUTE FUNCTION refuse();`); err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.Consume(ctx, intents.Message{Consumer: "orders", ID: "m-1"}, handler); err == nil || !strings.Contains(err.Error(), "refused by test") {
		t.Fatalf("Consume with the intents' insert failing = %v, want the failure", err)
	}
	if m, o, i := counts(); m+o+i != 0 {
		t.Fatalf("after a failed intents insert: %d markers, %d orders, %d intents; want nothing", m, o, i)
	}

	// The transaction fails at COMMIT (a deferred constraint).
	if _, err := b.pool.Exec(ctx, `
		DROP TRIGGER refuse_intents ON outbox_intents;
		CREATE CONSTRAINT TRIGGER refuse_orders AFTER INSERT ON orders DEFERRABLE INITIALLY DEFERRED
			FOR EACH ROW EXECUTE FUNCTION refuse();`); err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.Consume(ctx, intents.Message{Consumer: "orders", ID: "m-1"}, handler); err == nil || !strings.Contains(err.Error(), "refused by test") {
		t.Fatalf("Consume failing at COMMIT = %v, want the failure", err)
	}
	if m, o, i := counts(); m+o+i != 0 {
		t.Fatalf("after a failed COMMIT: %d markers, %d orders, %d intents; want nothing", m, o, i)
	}

	// Both gone, the message is processed afresh.
	if _, err := b.pool.Exec(ctx, `DROP TRIGGER refuse_orders ON orders`); err != nil {
		t.Fatal(err)
	}
	if res, err := b.client.Consume(ctx, intents.Message{Consumer: "orders", ID: "m-1"}, handler); err != nil || res.Duplicate || len(res.Intents) != 1 {
		t.Fatalf("Consume after the failures = %+v, %v", res, err)
	}
	if m, o, i := counts(); m != 1 || o != 1 || i != 1 {
		t.Fatalf("after the redelivery: %d markers, %d orders, %d intents; want one each", m, o, i)
	}
}

// A database that was never migrated fails every write with one typed
// error naming `outboxd migrate`, before the handler runs.
func TestUnmigratedDatabaseIsOneClearError(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, _ := pgtest.NewEmptyDB(t)
	client, err := intents.NewClient(pool, &intents.Config{Providers: testRegistry(t)})
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	_, err = client.Consume(ctx, intents.Message{Consumer: "orders", ID: "m-1"}, func(context.Context, pgx.Tx, *intents.Recorder) error {
		ran = true
		return nil
	})
	var nm *intents.NotMigratedError
	if !errors.Is(err, intents.ErrNotMigrated) || !errors.As(err, &nm) || nm.Current != 0 || !strings.Contains(err.Error(), "outboxd migrate") || ran {
		t.Fatalf("Consume on an unmigrated database = %v (handler ran: %v), want a *NotMigratedError naming outboxd migrate", err, ran)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := client.RecordTx(ctx, tx, intents.Intent{Kind: sendgridprovider.KindEmail, Payload: receipt("a@example.com")})
		return err
	})
	if !errors.Is(err, intents.ErrNotMigrated) {
		t.Fatalf("RecordTx on an unmigrated database = %v, want ErrNotMigrated", err)
	}
}
