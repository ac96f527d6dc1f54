package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
	"github.com/outboxkit/outbox/providers/stripeprovider"
)

// emailPayload is the intent every consume scenario records.
const emailPayload = `{"from": {"email": "shop@example.com"}, "to": [{"email": "buyer@example.com"}], "subject": "Receipt", "text": "Thanks"}`

// rawConsumeSQL is the consume baseline: the rows Consume writes for a
// message with one intent (marker, intent, its event, its River job with
// River's unique key and states), in hand-written SQL.
const rawConsumeSQL = `
WITH marker AS (
    INSERT INTO outbox_processed_messages (consumer, message_id) VALUES ($1, $2)
    ON CONFLICT DO NOTHING RETURNING 1
), intent AS (
    INSERT INTO outbox_intents (idempotency_key, kind, provider, payload, consumer, message_id)
    SELECT $1 || ':' || $2, 'sendgrid.email', 'sendgrid', $3, $1, $2 FROM marker
    RETURNING id
), event AS (
    INSERT INTO outbox_events (intent_id, actor, to_state, reason) SELECT id, 'bench', 'pending', 'recorded' FROM intent
)
INSERT INTO river_job (kind, args, queue, max_attempts, state, priority, unique_key, unique_states)
SELECT 'outbox_dispatch', jsonb_build_object('intent_id', id), 'outbox', 100, 'available', 1,
    sha256(convert_to('&kind=outbox_dispatch&args={"intent_id":' || id || '}', 'UTF8')), 241::bit(8)
FROM intent`

// rawBatchSQL is the batch baseline: the same rows for many messages of
// one consumer, in one statement.
const rawBatchSQL = `
WITH marker AS (
    INSERT INTO outbox_processed_messages (consumer, message_id)
    SELECT $1, id FROM unnest($2::text[]) AS t(id)
    ON CONFLICT DO NOTHING RETURNING message_id
), intent AS (
    INSERT INTO outbox_intents (idempotency_key, kind, provider, payload, consumer, message_id)
    SELECT $1 || ':' || message_id, 'sendgrid.email', 'sendgrid', $3, $1, message_id FROM marker
    RETURNING id
), event AS (
    INSERT INTO outbox_events (intent_id, actor, to_state, reason) SELECT id, 'bench', 'pending', 'recorded' FROM intent
)
INSERT INTO river_job (kind, args, queue, max_attempts, state, priority, unique_key, unique_states)
SELECT 'outbox_dispatch', jsonb_build_object('intent_id', id), 'outbox', 100, 'available', 1,
    sha256(convert_to('&kind=outbox_dispatch&args={"intent_id":' || id || '}', 'UTF8')), 241::bit(8)
FROM intent`

// recordingRegistry validates intents for recording; it performs nothing.
func recordingRegistry() (*providers.Registry, error) {
	sp, err := stripeprovider.New(stripeprovider.Config{})
	if err != nil {
		return nil, err
	}
	sg, err := sendgridprovider.New(sendgridprovider.Config{})
	if err != nil {
		return nil, err
	}
	return providers.NewRegistry(sp, sg)
}

// recordEmail is the handler of every consume scenario: one intent.
func recordEmail(_ context.Context, _ pgx.Tx, rec *intents.Recorder) error {
	return rec.Record(intents.Intent{Kind: sendgridprovider.KindEmail, Payload: json.RawMessage(emailPayload)})
}

func (r *runner) consumeRows(ctx context.Context) ([]Row, error) {
	var rows []Row
	for _, consumers := range []int{1, 8, 32} {
		row, err := r.consumeRow(ctx, consumers)
		if err != nil {
			return nil, err
		}
		rows = append(rows, row)
	}
	return rows, nil
}

func (r *runner) consumeRow(ctx context.Context, consumers int) (Row, error) {
	db, err := r.newDatabase(ctx, "consume", consumers+8)
	if err != nil {
		return Row{}, err
	}
	defer r.closeDatabase(ctx, db)
	client, err := r.recordingClient(db.pool)
	if err != nil {
		return Row{}, err
	}
	var seq atomic.Int64
	consume := func(ctx context.Context) error {
		_, err := client.Consume(ctx, intents.Message{Consumer: "bench", ID: fmt.Sprint("c-", seq.Add(1))}, recordEmail)
		return err
	}
	raw := func(ctx context.Context) error {
		return pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, rawConsumeSQL, "bench", fmt.Sprint("r-", seq.Add(1)), emailPayload)
			return err
		})
	}
	n := r.sizes.ConsumeMessages
	r.progress("consume: %d messages each through Consume and the hand-written baseline, %d consumers", n, consumers)
	rawTime, consumeTime, err := alternate(ctx, consumers, n, raw, consume)
	if err != nil {
		return Row{}, err
	}
	target := 0.85
	if consumers > 1 {
		target = 0.80
	}
	return ratioRow(fmt.Sprintf("Consume, 1 intent/message, %d consumer%s", consumers, plural(consumers)), "msg/s",
		float64(n)/consumeTime.Seconds(), "hand-written pgx, same rows, one tx", float64(n)/rawTime.Seconds(), target), nil
}

func (r *runner) batchRows(ctx context.Context) ([]Row, error) {
	db, err := r.newDatabase(ctx, "batch", 8)
	if err != nil {
		return nil, err
	}
	defer r.closeDatabase(ctx, db)
	client, err := r.recordingClient(db.pool)
	if err != nil {
		return nil, err
	}
	size := r.sizes.BatchSize
	var seq atomic.Int64
	ids := func(prefix string) []string {
		out := make([]string, size)
		for i := range out {
			out[i] = fmt.Sprint(prefix, seq.Add(1))
		}
		return out
	}
	batch := func(ctx context.Context) error {
		msgs := make([]intents.Message, size)
		for i, id := range ids("c-") {
			msgs[i] = intents.Message{Consumer: "bench", ID: id}
		}
		_, err := client.ConsumeBatch(ctx, msgs, func(ctx context.Context, tx pgx.Tx, _ intents.Message, rec *intents.Recorder) error {
			return recordEmail(ctx, tx, rec)
		})
		return err
	}
	raw := func(ctx context.Context) error {
		return pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, rawBatchSQL, "bench", ids("r-"), emailPayload)
			return err
		})
	}
	n := r.sizes.Batches
	r.progress("batch: %d batches of %d messages each through ConsumeBatch and the hand-written baseline, 1 consumer", n, size)
	rawTime, batchTime, err := alternate(ctx, 1, n, raw, batch)
	if err != nil {
		return nil, err
	}
	msgs := float64(n * size)
	return []Row{ratioRow(fmt.Sprintf("ConsumeBatch, batches of %d, 1 consumer", size), "msg/s", msgs/batchTime.Seconds(),
		"hand-written pgx, same rows, one tx per batch", msgs/rawTime.Seconds(), 0.85)}, nil
}

func (r *runner) recordingClient(pool *pgxpool.Pool) (*intents.Client, error) {
	reg, err := recordingRegistry()
	if err != nil {
		return nil, err
	}
	return intents.NewClient(pool, &intents.Config{Providers: reg, Logger: r.cfg.Logger})
}

// alternate times a baseline and a subject, n operations each at the given
// concurrency, in four interleaved rounds (baseline, subject, baseline,
// subject, ...) after a short warm-up, so that neither side is favoured by
// running on smaller tables, a warmer cache or a quieter machine.
func alternate(ctx context.Context, workers, n int, baseline, subject func(context.Context) error) (baseTime, subjectTime time.Duration, err error) {
	warm := min(n/10+1, 50)
	for _, fn := range []func(context.Context) error{baseline, subject} {
		if _, err := timeParallel(ctx, workers, warm, fn); err != nil {
			return 0, 0, err
		}
	}
	const rounds = 4
	for i := range rounds {
		share := n/rounds + boolInt(i < n%rounds)
		if share == 0 {
			continue
		}
		d, err := timeParallel(ctx, workers, share, baseline)
		if err != nil {
			return 0, 0, fmt.Errorf("baseline: %w", err)
		}
		baseTime += d
		d, err = timeParallel(ctx, workers, share, subject)
		if err != nil {
			return 0, 0, err
		}
		subjectTime += d
	}
	return baseTime, subjectTime, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// timeParallel runs fn n times over the given number of goroutines and
// returns how long it took.
func timeParallel(ctx context.Context, workers, n int, fn func(context.Context) error) (time.Duration, error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				if err := fn(ctx); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	for err := range errs {
		return 0, err
	}
	return elapsed, nil
}

// ratioRow is a row whose target is a share of its baseline.
func ratioRow(measure, unit string, figure float64, baseline string, baselineFigure, target float64) Row {
	row := Row{Measure: measure, Unit: unit, Figure: figure, Baseline: baseline, BaselineFigure: baselineFigure,
		Target: fmt.Sprintf("≥ %.0f%% of baseline", 100*target)}
	if baselineFigure > 0 {
		row.Ratio = figure / baselineFigure
	}
	row.Met = row.Ratio >= target
	return row
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
