package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/cmd/outboxd/internal/sandbox"
	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/stripeprovider"
	"github.com/outboxkit/outbox/providers/stripeprovider/stripedouble"
)

const createOrdersSQL = `
CREATE TABLE demo_orders (
    id           text PRIMARY KEY,
    customer     text NOT NULL,
    email        text NOT NULL,
    amount_cents integer NOT NULL,
    refund_cents integer NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
)`

const insertOrderSQL = `INSERT INTO demo_orders (id, customer, email, amount_cents, refund_cents) VALUES ($1, $2, $3, $4, $5)`

const stateCountsSQL = `
SELECT
    count(*),
    count(*) FILTER (WHERE state IN ('pending', 'dispatching')),
    count(*) FILTER (WHERE state = 'succeeded'),
    count(*) FILTER (WHERE state = 'in_doubt'),
    count(*) FILTER (WHERE state = 'failed'),
    count(*) FILTER (WHERE state = 'waiting')
FROM outbox_intents`

// progressLegend says what the columns of the progress lines count.
const progressLegend = `progress, twice a second: the broker's deliveries, and how many consumers
acknowledged (a consumer that crashed after its commit never acks: the broker
delivers again); the intents recorded, by state: open = pending or
dispatching (not performed yet), waiting = a refund or receipt waiting for
its payment, succeeded, in_doubt (held for an operator), failed
`

// waitDone waits until the broker has every delivery acknowledged and no
// intent is pending or dispatching, printing progress. A waiting intent is
// released in the transaction that settles the payment it waits for, so
// once nothing is pending or dispatching, whatever still waits waits for an
// in_doubt payment.
func waitDone(ctx context.Context, pool *pgxpool.Pool, b *broker, progress io.Writer) error {
	fmt.Fprint(progress, progressLegend)
	ticker := time.NewTicker(500 * time.Millisecond)
	defer ticker.Stop()
	for {
		var total, open, succeeded, inDoubt, failed, waiting int
		if err := pool.QueryRow(ctx, stateCountsSQL).Scan(&total, &open, &succeeded, &inDoubt, &failed, &waiting); err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("demo: %s: %w", stoppedBy(ctx), ctx.Err())
			}
			return err
		}
		done := b.finished()
		fmt.Fprintf(progress, "  %d orders: deliveries %4d, acked %4d | intents %4d: open %3d, waiting %3d, succeeded %4d, in_doubt %3d, failed %3d\n",
			len(b.orders), b.delivered.Load(), b.acked.Load(), total, open, waiting, succeeded, inDoubt, failed)
		if done && open == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("demo: %s with %d intents still open and broker done=%v: %w", stoppedBy(ctx), open, done, ctx.Err())
		case <-ticker.C:
		}
	}
}

// stoppedBy says why ctx ended: the run's --timeout, or an interrupt.
func stoppedBy(ctx context.Context) string {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return "timed out"
	}
	return "stopped"
}

type intentOutcome struct {
	ID        int64
	Kind      string
	State     string
	LastError string
}

// fill completes the report from the database and the doubles' own records,
// and lists every violation of exactly-once, and of the order between an
// order's effects, it finds.
func fill(ctx context.Context, pool *pgxpool.Pool, dbl *sandbox.Sandbox, r *Report) error {
	countAtDoubles(dbl, r)
	if err := judgeIntents(ctx, pool, dbl, r); err != nil {
		return err
	}
	if err := checkOrdersStored(ctx, pool, r); err != nil {
		return err
	}
	if err := checkOrder(ctx, pool, dbl, r); err != nil {
		return err
	}
	return pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM outbox_intent_attempts WHERE replayed),
		(SELECT count(*) FROM outbox_intent_events WHERE reason LIKE 'reconciled%')`).Scan(&r.ProviderReplays, &r.Reconciled)
}

// countAtDoubles counts the effects and the faults the doubles recorded.
func countAtDoubles(dbl *sandbox.Sandbox, r *Report) {
	stripe, sendgrid := dbl.Stripe(), dbl.SendGrid()
	r.PaymentsAtStripe = len(stripe.PaymentIntents())
	r.RefundsAtStripe = len(stripe.Refunds())
	r.EmailsAtSendGrid = len(sendgrid.Emails())
	r.DuplicateEffects = dbl.DuplicateEffects()
	if r.DuplicateEffects > 0 {
		r.Problems = append(r.Problems, fmt.Sprintf("%d intents caused more than one effect at a double", r.DuplicateEffects))
	}
	r.FaultsInjected = map[string]int{}
	for kind, n := range stripe.Stats().Faults {
		r.FaultsInjected["stripe."+string(kind)] = n
	}
	for kind, n := range sendgrid.Stats().Faults {
		r.FaultsInjected["sendgrid."+string(kind)] = n
	}
}

// judgeIntents counts the intents by state and checks each against its
// effects at the double that performs it.
func judgeIntents(ctx context.Context, pool *pgxpool.Pool, dbl *sandbox.Sandbox, r *Report) error {
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
		effects := dbl.SendGrid().EffectsFor(o.ID)
		if strings.HasPrefix(o.Kind, "stripe.") {
			effects = dbl.Stripe().EffectsFor(o.ID)
		}
		judgeIntent(o, effects, r)
	}
	return nil
}

func judgeIntent(o intentOutcome, effects int, r *Report) {
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
		if r.InDoubtByKind == nil {
			r.InDoubtByKind = map[string]int{}
		}
		r.InDoubtByKind[o.Kind]++
	case "cancelled":
		r.Cancelled++
		if effects != 0 {
			r.Problems = append(r.Problems, fmt.Sprintf("intent %d (%s) was cancelled after %d effects at the double", o.ID, o.Kind, effects))
		}
	case "waiting":
		r.Waiting++
	default:
		r.Lost++
		r.Problems = append(r.Problems, fmt.Sprintf("intent %d (%s) left %s", o.ID, o.Kind, o.State))
	}
	if effects > 1 {
		r.Problems = append(r.Problems, fmt.Sprintf("intent %d (%s) has %d effects", o.ID, o.Kind, effects))
	}
}

// checkOrdersStored checks that every order delivered was stored once, with
// its processed marker and exactly its intents.
func checkOrdersStored(ctx context.Context, pool *pgxpool.Pool, r *Report) error {
	var ordersStored, markers, ordersMissingIntents int
	err := pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM demo_orders),
		(SELECT count(*) FROM outbox_processed_messages),
		(SELECT count(*) FROM demo_orders o
		 WHERE (SELECT count(*) FROM outbox_intents i WHERE i.reference = o.id) <> 2 + (o.refund_cents > 0)::int)`).
		Scan(&ordersStored, &markers, &ordersMissingIntents)
	if err != nil {
		return err
	}
	if ordersStored != r.Orders || markers != r.Orders {
		r.Problems = append(r.Problems, fmt.Sprintf("%d orders delivered but %d stored and %d processed markers", r.Orders, ordersStored, markers))
	}
	if ordersMissingIntents > 0 {
		r.Lost += ordersMissingIntents
		r.Problems = append(r.Problems, fmt.Sprintf("%d orders do not have exactly their intents", ordersMissingIntents))
	}
	return nil
}

// orderSQL lists each order's payment and what came after it: the payment's
// state and PaymentIntent id, when it succeeded (by an attempt or a look-up
// at Stripe after an ambiguous one), and for the refund and the receipt
// their id, their state and whether they were attempted.
const orderSQL = `
SELECT o.id, o.amount_cents, o.refund_cents,
       p.state, coalesce(p.provider_ref, ''),
       CASE WHEN p.state = 'succeeded' THEN p.finished_at END,
       coalesce(f.id, 0), coalesce(f.state, ''), coalesce(f.attempt_count, 0) > 0,
       c.id, c.state, c.attempt_count > 0
FROM demo_orders o
JOIN outbox_intents p ON p.reference = o.id AND p.name = 'payment'
JOIN outbox_intents c ON c.reference = o.id AND c.name = 'receipt'
LEFT JOIN outbox_intents f ON f.reference = o.id AND f.name = 'refund'
ORDER BY o.id`

// checkOrder checks what ordering promises, from the database and the
// doubles: nothing that comes after a payment attempted unless the payment
// succeeded, nor performed at a double before it succeeded (the double's
// own record of the call: an attempt's start is its claim's time on the
// dispatcher's clock, taken before the claim's statement ran); each refund refunded its own order's PaymentIntent, by
// the order's refund amount, and never more than was charged; an order
// whose payment failed had nothing after it performed (cancelled), and one
// whose payment is in_doubt has it waiting.
func checkOrder(ctx context.Context, pool *pgxpool.Pool, dbl *sandbox.Sandbox, r *Report) error {
	stripe := dbl.Stripe()
	refunds := map[string][]stripedouble.Refund{}
	performed := map[string]time.Time{} // intent id → its first effect at a double
	for _, rf := range stripe.Refunds() {
		refunds[rf.Metadata["order_id"]] = append(refunds[rf.Metadata["order_id"]], rf)
		firstAt(performed, rf.Metadata[providers.MetadataIntentID], rf.Created)
	}
	for _, em := range dbl.SendGrid().Emails() {
		firstAt(performed, em.CustomArgs[providers.MetadataIntentID], em.AcceptedAt)
	}
	rows, err := pool.Query(ctx, orderSQL)
	if err != nil {
		return err
	}
	defer rows.Close()
	problem := func(format string, args ...any) { r.Problems = append(r.Problems, fmt.Sprintf(format, args...)) }
	for rows.Next() {
		var (
			id, payState, pi, refundState, receiptState string
			amount, refund, refundID, receiptID         int64
			paid                                        *time.Time
			refundTried, receiptTried                   bool
		)
		if err := rows.Scan(&id, &amount, &refund, &payState, &pi, &paid, &refundID, &refundState, &refundTried,
			&receiptID, &receiptState, &receiptTried); err != nil {
			return err
		}
		for _, after := range []struct {
			name, state string
			id          int64
			tried       bool
		}{{"refund", refundState, refundID, refundTried}, {"receipt", receiptState, receiptID, receiptTried}} {
			if after.state == "" {
				continue
			}
			if after.tried && paid == nil {
				problem("%s: the %s was attempted, but its payment did not succeed", id, after.name)
			}
			if at, ok := performed[strconv.FormatInt(after.id, 10)]; ok && paid != nil && at.Before(*paid) {
				problem("%s: the %s was performed at %s, before its payment succeeded at %s", id, after.name,
					at.Format(time.RFC3339Nano), paid.Format(time.RFC3339Nano))
			}
			switch payState {
			case "failed", "cancelled":
				if after.state != "cancelled" {
					problem("%s: the payment %s but the %s is %s", id, payState, after.name, after.state)
				}
			case "in_doubt":
				if after.state != "waiting" {
					problem("%s: the payment is in_doubt but the %s is %s", id, after.name, after.state)
				}
			}
		}
		made := refunds[id]
		if len(made) > 0 {
			r.AmountRefunded += made[0].Amount
		}
		switch {
		case refund == 0 && len(made) > 0:
			problem("%s: %d refunds for an order not refunded", id, len(made))
		case len(made) > 1:
			problem("%s: refunded %d times", id, len(made))
		case len(made) == 1 && (made[0].PaymentIntent != pi || made[0].Amount != refund):
			problem("%s: refund of %d on %s, want %d on the order's PaymentIntent %s", id, made[0].Amount, made[0].PaymentIntent, refund, pi)
		}
		if pi != "" && stripe.Refunded(pi) > amount {
			problem("%s: %d refunded of %d charged", id, stripe.Refunded(pi), amount)
		}
	}
	return rows.Err()
}

func containsDecline(s string) bool { return strings.Contains(s, "decline") }

// firstAt records in first the earliest of at for intent id ("" : none).
func firstAt(first map[string]time.Time, id string, at time.Time) {
	if id == "" {
		return
	}
	if t, ok := first[id]; !ok || at.Before(t) {
		first[id] = at
	}
}
