package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/providers/stripeprovider"
)

// orderedKeys is how many ordering keys the ordered scenario spreads its
// intents over, round robin: 50 streams (customers, orders) at once.
const orderedKeys = 50

// orderedTarget is the ordered rows' target, as a share of the same
// workload unordered. Per-key order costs a statement at record time
// (most intents are recorded waiting: their job is removed and their event
// rewritten) and a release at each settlement (the next intent's job is
// inserted then), and each key's intents run one after the other, so a
// key's next intent waits for a fetch after its predecessor settled. Half
// the unordered rate is what that should cost at most.
const orderedTarget = 0.5

// orderedRows measures the cost of per-key order: the same intents (Stripe
// PaymentIntents against a zero-latency double, one per message, recorded
// through ConsumeBatch and then dispatched at Sizes.Workers), recorded once
// without an ordering key and once with one of orderedKeys keys each, in
// the same run, each in a database of its own. Two rows: recording, and
// dispatching, ordered against unordered.
func (r *runner) orderedRows(ctx context.Context) ([]Row, error) {
	workers, n := r.sizes.Workers, r.sizes.DispatchIntents
	type result struct{ record, dispatch float64 }
	var unordered, ordered result
	for _, keys := range []int{0, orderedKeys} {
		db, err := r.newDatabase(ctx, "ordered", min(workers+10, 60))
		if err != nil {
			return nil, err
		}
		rec, disp, err := r.orderedRun(ctx, db, workers, n, keys)
		r.closeDatabase(ctx, db)
		if err != nil {
			return nil, err
		}
		if keys == 0 {
			unordered = result{rec, disp}
		} else {
			ordered = result{rec, disp}
		}
	}
	record := ratioRow(fmt.Sprintf("Record with ordering keys (%d keys), ConsumeBatch of 500", orderedKeys), "intents/s", ordered.record,
		"the same intents without ordering keys", unordered.record, orderedTarget)
	dispatch := ratioRow(fmt.Sprintf("Dispatch with ordering keys (%d keys, one at a time each), %d workers", orderedKeys, workers), "intents/s", ordered.dispatch,
		"the same intents without ordering keys", unordered.dispatch, orderedTarget)
	dispatch.Note = fmt.Sprintf("keyed (Stripe double, no latency); at most %d intents in flight when ordered", min(orderedKeys, workers))
	return []Row{record, dispatch}, nil
}

// orderedRun records n intents spread over keys ordering keys (none when
// 0) and dispatches them, and returns both rates.
func (r *runner) orderedRun(ctx context.Context, db *database, workers, n, keys int) (record, dispatch float64, err error) {
	dbl, err := startDoubles(nil, false)
	if err != nil {
		return 0, 0, err
	}
	defer dbl.Close()
	client, err := intents.NewClient(db.pool, &intents.Config{Providers: dbl.Registry(), Logger: r.cfg.Logger})
	if err != nil {
		return 0, 0, err
	}
	r.progress("ordered: recording %d intents over %d ordering keys (0: none)", n, keys)
	payload := kindPayload(stripeprovider.KindPaymentIntent)
	start := time.Now()
	for from := 0; from < n; from += 500 {
		msgs := make([]intents.Message, min(500, n-from))
		for i := range msgs {
			msgs[i] = intents.Message{Consumer: "bench", ID: fmt.Sprint("o-", from+i)}
		}
		_, err := client.ConsumeBatch(ctx, msgs, func(_ context.Context, _ pgx.Tx, msg intents.Message, rec *intents.Recorder) error {
			in := intents.Intent{Kind: stripeprovider.KindPaymentIntent, Payload: payload}
			if keys > 0 {
				var i int
				_, _ = fmt.Sscanf(msg.ID, "o-%d", &i)
				in.OrderingKey = fmt.Sprintf("customer-%d", i%keys)
			}
			return rec.Record(in)
		})
		if err != nil {
			return 0, 0, err
		}
	}
	record = float64(n) / time.Since(start).Seconds()
	r.progress("ordered: dispatching them, %d workers", workers)
	took, err := r.runDispatcher(ctx, db.pool, dbl.Registry(), workers, n, nil)
	if err != nil {
		return 0, 0, err
	}
	if dup := dbl.DuplicateEffects(); dup != 0 {
		return 0, 0, fmt.Errorf("%d intents were performed twice", dup)
	}
	return record, float64(n) / took.Seconds(), nil
}
