package dispatcher_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/dispatcher"
	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/internal/testkit/pgbouncer"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
	"github.com/outboxkit/outbox/providers/stripeprovider"
)

// Behind PgBouncer in transaction mode (docs/operating.md, "Behind a
// connection pooler"): consumers record and a PollOnly dispatcher performs
// every intent once, with pgx told not to prepare statements, which such
// a pooler cannot keep for a client. Each pgx mode that prepares nothing
// is tried.
func TestConsumersAndDispatcherBehindPgBouncer(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"exec", "simple_protocol"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			b := setup(t, options{})
			bouncer := pgbouncer.ForTest(t, b.dbURL)
			pool := pooledPool(t, bouncer, mode)
			rec, err := intents.NewClient(pool, &intents.Config{Providers: b.registry})
			if err != nil {
				t.Fatal(err)
			}
			cfg := b.config()
			cfg.PollOnly = true
			cfg.FetchPollInterval = 0 // the poll-only default
			b.startOn(t, pool, cfg)

			const messages = 60
			var ids []int64
			for i := range messages {
				kind, payload := stripeprovider.KindPaymentIntent, paymentPayload
				if i%2 == 1 {
					kind, payload = sendgridprovider.KindEmail, emailPayload
				}
				res, err := rec.Consume(context.Background(), intents.Message{Consumer: "pooled", ID: fmt.Sprintf("m-%d", i)},
					func(ctx context.Context, tx pgx.Tx, r *intents.Recorder) error {
						return r.Record(intents.Intent{Kind: kind, Payload: json.RawMessage(payload)})
					})
				if err != nil {
					t.Fatalf("Consume through PgBouncer (%s): %v", mode, err)
				}
				ids = append(ids, res.Intents[0].ID)
			}
			// A redelivery through the pooler is recognised too.
			res, err := rec.Consume(context.Background(), intents.Message{Consumer: "pooled", ID: "m-0"},
				func(ctx context.Context, tx pgx.Tx, r *intents.Recorder) error {
					return r.Record(intents.Intent{Kind: stripeprovider.KindPaymentIntent, Payload: json.RawMessage(paymentPayload)})
				})
			if err != nil || !res.Duplicate {
				t.Fatalf("a redelivered message through PgBouncer = %+v, %v; want a duplicate", res, err)
			}
			for _, id := range ids {
				if s := b.waitSettled(t, id); s.State != intenttype.StateSucceeded || s.Attempts != 1 {
					t.Fatalf("intent %d = %+v, want succeeded after one attempt", id, s)
				}
			}
			if got := len(b.stripe.PaymentIntents()) + len(b.sendgrid.Emails()); got != messages {
				t.Fatalf("the doubles saw %d effects for %d intents", got, messages)
			}
			if d := b.stripe.DuplicateEffects() + b.sendgrid.DuplicateEffects(); d != 0 {
				t.Fatalf("%d intents had duplicate effects", d)
			}
		})
	}
}

// pooledPool opens a pool on bouncerURL whose statements pgx sends in
// mode (its default_query_exec_mode), closed when t ends.
func pooledPool(t *testing.T, bouncerURL, mode string) *pgxpool.Pool {
	t.Helper()
	u, err := url.Parse(bouncerURL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("default_query_exec_mode", mode)
	u.RawQuery = q.Encode()
	cfg, err := pgxpool.ParseConfig(u.String())
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 20
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// A dispatcher behind a transaction pooler refuses at Start what the
// pooler would break, naming the setting, and claims nothing; connected
// to Postgres itself it sees no pooler.
func TestStartRefusesWhatATransactionPoolerBreaks(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	id := b.record(t, stripeprovider.KindPaymentIntent, paymentPayload)
	bouncer := pgbouncer.ForTest(t, b.dbURL)
	for _, c := range []struct {
		mode     string
		pollOnly bool
		names    []string
	}{
		{mode: "exec", names: []string{"PollOnly"}},
		{mode: "cache_statement", pollOnly: true, names: []string{"default_query_exec_mode=exec"}},
		{mode: "cache_describe", names: []string{"PollOnly", "default_query_exec_mode=exec"}},
	} {
		cfg := b.config()
		cfg.PollOnly = c.pollOnly
		d, err := dispatcher.New(pooledPool(t, bouncer, c.mode), cfg)
		if err != nil {
			t.Fatal(err)
		}
		err = d.Start(context.Background())
		if err == nil {
			_ = d.Stop(context.Background())
			t.Fatalf("Start behind PgBouncer, %s, PollOnly %t: no error", c.mode, c.pollOnly)
		}
		if !errors.Is(err, dispatcher.ErrSessionsPooled) {
			t.Errorf("Start behind PgBouncer, %s, PollOnly %t = %v; want ErrSessionsPooled", c.mode, c.pollOnly, err)
		}
		for _, name := range c.names {
			if !strings.Contains(err.Error(), name) {
				t.Errorf("Start behind PgBouncer, %s, PollOnly %t = %v; want it to name %s", c.mode, c.pollOnly, err, name)
			}
		}
	}
	if s := b.intent(t, id); s.State != intenttype.StatePending || s.Attempts != 0 {
		t.Fatalf("after the refused starts the intent is %+v, want pending, never attempted", s)
	}
	direct, err := dispatcher.New(b.pool, b.config())
	if err != nil {
		t.Fatal(err)
	}
	if err := direct.Start(context.Background()); err != nil {
		t.Fatalf("Start on Postgres itself: %v", err)
	}
	if err := direct.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}
