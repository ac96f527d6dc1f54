package dispatcher_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/dispatcher"
	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/internal/testkit/pgtest"
	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/stripeprovider"
	"github.com/outboxkit/outbox/providers/webhookprovider"
)

// A receiver that answers 200 with a reference Postgres cannot store as
// text (invalid UTF-8, NUL) or a very long one: the known outcome is
// stored, escaped and bounded, and the delivery is made once, keyed or not
// (DESIGN.md, invariant 14). Before, the settlement was refused: unkeyed,
// a confirmed delivery ended in_doubt; keyed, the intent was taken over
// and delivered again on every job run, 16 to 22 times in 4 s.
func TestAProviderAnswerPostgresRefusesIsStoredAndActedOnOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		ref   string
		keyed bool
		want  string
	}{
		{"invalid UTF-8, keyed", "ref-\xff\xfe", true, `ref-\xff\xfe`},
		{"invalid UTF-8, unkeyed", "ref-\xff\xfe", false, `ref-\xff\xfe`},
		{"oversized, keyed", strings.Repeat("r", 100_000), true, strings.Repeat("r", 512-len("…[cut]")) + "…[cut]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var deliveries atomic.Int64
			receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				deliveries.Add(1)
				w.Header()["X-Request-Id"] = []string{tc.ref}
				w.WriteHeader(http.StatusOK)
			}))
			t.Cleanup(receiver.Close)
			ep := webhookprovider.Endpoint{URL: receiver.URL + "/hook", Secret: "whsec_test"}
			if tc.keyed {
				ep.IdempotencyHeader, ep.KeyWindow = "Idempotency-Key", 24*time.Hour
			}
			wp, err := webhookprovider.New(webhookprovider.Config{Endpoints: map[string]webhookprovider.Endpoint{"hook": ep}})
			if err != nil {
				t.Fatal(err)
			}
			reg, err := providers.NewRegistry(wp)
			if err != nil {
				t.Fatal(err)
			}
			pool, _ := pgtest.NewDB(t)
			client, err := intents.NewClient(pool, &intents.Config{Providers: reg})
			if err != nil {
				t.Fatal(err)
			}
			res, err := client.Consume(context.Background(), intents.Message{Consumer: "test", ID: "m-1"},
				func(ctx context.Context, tx pgx.Tx, rec *intents.Recorder) error {
					return rec.Record(intents.Intent{Kind: webhookprovider.KindPost, Payload: json.RawMessage(`{"endpoint": "hook", "event": "e", "data": {}}`)})
				})
			if err != nil {
				t.Fatal(err)
			}
			id := res.Intents[0].ID
			d, err := dispatcher.New(pool, &dispatcher.Config{Providers: reg, CallTimeout: 2 * time.Second,
				RetryBackoff: 10 * time.Millisecond, RetryBackoffMax: 50 * time.Millisecond, FetchCooldown: 5 * time.Millisecond, FetchPollInterval: 20 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			if err := d.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = d.Stop(context.Background()) })

			var state, ref, attemptRef string
			deadline := time.Now().Add(20 * time.Second)
			for {
				err := pool.QueryRow(context.Background(), `
					SELECT i.state, coalesce(i.provider_ref, ''), coalesce(a.provider_ref, '')
					FROM outbox_intents i LEFT JOIN outbox_intent_attempts a ON a.intent_id = i.id AND a.attempt = 1
					WHERE i.id = $1`, id).Scan(&state, &ref, &attemptRef)
				if err != nil {
					t.Fatal(err)
				}
				if state != string(intenttype.StatePending) && state != string(intenttype.StateDispatching) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("intent still %s after 20 s, %d deliveries", state, deliveries.Load())
				}
				time.Sleep(10 * time.Millisecond)
			}
			if state != string(intenttype.StateSucceeded) || ref != tc.want || attemptRef != tc.want {
				t.Fatalf("intent %s, provider_ref %.60q, attempt's %.60q; want succeeded with %.60q", state, ref, attemptRef, tc.want)
			}
			if n := deliveries.Load(); n != 1 {
				t.Fatalf("the receiver got %d deliveries, want 1", n)
			}
		})
	}
}

// A take-over of an intent left dispatching is an attempt like any other
// (DESIGN.md, invariant 14): with its budget used, even inside the key
// window, the provider is not called again; the intent is held in_doubt.
// Its claim is the queue's, started long ago: the sweep the dispatcher
// runs at its start hands it to a River job, which takes it over.
func TestATakeOverPastTheBudgetCallsNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	id := b.record(t, stripeprovider.KindPaymentIntent, paymentPayload)
	if _, err := b.pool.Exec(context.Background(), `
		UPDATE outbox_intents
		SET state = 'dispatching', attempt_count = 3, claimed_attempt = 3, may_have_acted = true,
		    provider_key = 'ns.0/' || idempotency_key, key_namespace = 'ns', key_first_used_at = $2,
		    attempt_started_at = $3
		WHERE id = $1`, id, b.clock.Now().Add(-time.Minute), b.clock.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	cfg := b.config()
	cfg.MaxAttemptsByKind = map[string]int{stripeprovider.KindPaymentIntent: 3}
	b.start(t, cfg)
	// Held, looked up, and (no charge under the key, read consistently)
	// failed with its budget spent: never called again.
	s := b.waitDone(t, id)
	if s.State != intenttype.StateFailed || s.Attempts != 3 {
		t.Fatalf("intent = %+v, want failed with its 3 attempts, uncalled", s)
	}
	if reasons := strings.Join(b.eventReasons(t, id), " | "); !strings.Contains(reasons, "its 3 attempts are used") {
		t.Fatalf("events %s, want the take-over refused for the budget", reasons)
	}
	if n := len(b.stripe.PaymentIntents()); n != 0 {
		t.Fatalf("the Stripe double made %d PaymentIntents, want 0: no call past the budget", n)
	}
}
