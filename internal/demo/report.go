package demo

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/providers/sendgridprovider"
	"github.com/outboxkit/outbox/providers/stripeprovider"
)

const createOrdersSQL = `
CREATE TABLE demo_orders (
    id           text PRIMARY KEY,
    customer     text NOT NULL,
    email        text NOT NULL,
    amount_cents integer NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
)`

const insertOrderSQL = `INSERT INTO demo_orders (id, customer, email, amount_cents) VALUES ($1, $2, $3, $4)`

const stateCountsSQL = `
SELECT
    count(*),
    count(*) FILTER (WHERE state IN ('pending', 'dispatching')),
    count(*) FILTER (WHERE state = 'succeeded'),
    count(*) FILTER (WHERE state = 'in_doubt'),
    count(*) FILTER (WHERE state = 'failed')
FROM outbox_intents`

// waitDone waits until the broker has every delivery acknowledged and no
// intent is pending or dispatching, printing progress.
func waitDone(ctx context.Context, pool *pgxpool.Pool, b *broker, progress io.Writer) error {
	ticker := time.NewTicker(500 * time.Millisecond)
	defer ticker.Stop()
	for {
		var total, open, succeeded, inDoubt, failed int
		if err := pool.QueryRow(ctx, stateCountsSQL).Scan(&total, &open, &succeeded, &inDoubt, &failed); err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("demo: timed out: %w", ctx.Err())
			}
			return err
		}
		done := b.finished()
		fmt.Fprintf(progress, "  %d orders: deliveries %4d, acked %4d | intents %4d: open %3d, succeeded %4d, in_doubt %3d, failed %3d\n",
			len(b.orders), b.delivered.Load(), b.acked.Load(), total, open, succeeded, inDoubt, failed)
		if done && open == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("demo: timed out with %d intents still open and broker done=%v: %w", open, done, ctx.Err())
		case <-ticker.C:
		}
	}
}

type intentOutcome struct {
	ID        int64
	Kind      string
	State     string
	LastError string
}

// fill completes the report from the database and the doubles' own records,
// and lists every violation of exactly-once it finds.
func (e *environment) fill(ctx context.Context, pool *pgxpool.Pool, r *Report) error {
	r.PaymentsAtStripe = len(e.stripe.PaymentIntents())
	r.EmailsAtSendGrid = len(e.sendgrid.Emails())
	r.DuplicateEffects = e.stripe.DuplicateEffects() + e.sendgrid.DuplicateEffects()
	if r.DuplicateEffects > 0 {
		r.Problems = append(r.Problems, fmt.Sprintf("%d intents caused more than one effect at a double", r.DuplicateEffects))
	}
	r.FaultsInjected = map[string]int{}
	for kind, n := range e.stripe.Stats().Faults {
		r.FaultsInjected["stripe."+string(kind)] = n
	}
	for kind, n := range e.sendgrid.Stats().Faults {
		r.FaultsInjected["sendgrid."+string(kind)] = n
	}

	rows, err := pool.Query(ctx, `SELECT id, kind, state, coalesce(last_error, '') FROM outbox_intents ORDER BY id`)
	if err != nil {
		return err
	}
	outcomes, err := pgx.CollectRows(rows, pgx.RowToStructByPos[intentOutcome])
	if err != nil {
		return err
	}
	r.IntentsRecorded = len(outcomes)
	for _, o := range outcomes {
		var effects int
		switch o.Kind {
		case stripeprovider.KindPaymentIntent:
			effects = e.stripe.EffectsFor(o.ID)
		case sendgridprovider.KindEmail:
			effects = e.sendgrid.EffectsFor(o.ID)
		}
		switch o.State {
		case "succeeded":
			r.Succeeded++
			if effects != 1 {
				r.Problems = append(r.Problems, fmt.Sprintf("intent %d (%s) succeeded with %d effects at the double", o.ID, o.Kind, effects))
			}
		case "failed":
			r.Failed++
			if o.Kind == stripeprovider.KindPaymentIntent && containsDecline(o.LastError) {
				r.DeclinedCards++
			}
		case "in_doubt":
			r.InDoubt++
		default:
			r.Lost++
			r.Problems = append(r.Problems, fmt.Sprintf("intent %d (%s) left %s", o.ID, o.Kind, o.State))
		}
		if effects > 1 {
			r.Problems = append(r.Problems, fmt.Sprintf("intent %d (%s) has %d effects", o.ID, o.Kind, effects))
		}
	}

	var ordersStored, markers, ordersMissingIntents int
	err = pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM demo_orders),
		(SELECT count(*) FROM outbox_processed_messages),
		(SELECT count(*) FROM demo_orders o WHERE (SELECT count(*) FROM outbox_intents i WHERE i.reference = o.id) <> 2)`).
		Scan(&ordersStored, &markers, &ordersMissingIntents)
	if err != nil {
		return err
	}
	if ordersStored != r.Orders || markers != r.Orders {
		r.Problems = append(r.Problems, fmt.Sprintf("%d orders delivered but %d stored and %d processed markers", r.Orders, ordersStored, markers))
	}
	if ordersMissingIntents > 0 {
		r.Lost += ordersMissingIntents
		r.Problems = append(r.Problems, fmt.Sprintf("%d orders do not have exactly their two intents", ordersMissingIntents))
	}
	if err := pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM outbox_attempts WHERE replayed),
		(SELECT count(*) FROM outbox_events WHERE reason LIKE 'reconciled%')`).Scan(&r.ProviderReplays, &r.Reconciled); err != nil {
		return err
	}
	return nil
}

func containsDecline(s string) bool { return strings.Contains(s, "decline") }
