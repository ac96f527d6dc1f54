package intents_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
)

// rawConsumeSQL writes the same rows as Consume with one intent (marker,
// intent, its event, its River job with River's unique key and states) in
// hand-written SQL: the baseline. outboxd bench (internal/bench) measures the
// same comparison with larger runs, alongside the other figures.
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

// BenchmarkConsumeVsRawSQL measures Consume with one intent per message
// against the hand-written baseline, in the same run on the same database,
// and reports Consume's throughput as a percentage of the baseline's.
func BenchmarkConsumeVsRawSQL(b *testing.B) {
	pool, _ := pgtest.NewDB(b)
	client, err := intents.NewClient(pool, &intents.Config{Providers: testRegistry(b)})
	if err != nil {
		b.Fatal(err)
	}
	payload := json.RawMessage(`{"from": {"email": "shop@example.com"}, "to": [{"email": "buyer@example.com"}], "subject": "Receipt", "text": "Thanks"}`)
	var seq atomic.Int64
	consume := func(ctx context.Context) error {
		_, err := client.Consume(ctx, intents.Message{Consumer: "bench", ID: fmt.Sprint("c-", seq.Add(1))},
			func(ctx context.Context, tx pgx.Tx, rec *intents.Recorder) error {
				return rec.Record(intents.Intent{Kind: sendgridprovider.KindEmail, Payload: payload})
			})
		return err
	}
	raw := func(ctx context.Context) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, rawConsumeSQL, "bench", fmt.Sprint("r-", seq.Add(1)), payload)
			return err
		})
	}
	for _, workers := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("consumers=%d", workers), func(b *testing.B) {
			rawTime := timeParallel(b, pool, workers, b.N, raw)
			consumeTime := timeParallel(b, pool, workers, b.N, consume)
			b.ReportMetric(float64(b.N)/consumeTime.Seconds(), "consume_msgs/s")
			b.ReportMetric(float64(b.N)/rawTime.Seconds(), "baseline_msgs/s")
			b.ReportMetric(100*rawTime.Seconds()/consumeTime.Seconds(), "%_of_baseline")
		})
	}
}

func timeParallel(b *testing.B, pool *pgxpool.Pool, workers, n int, fn func(context.Context) error) time.Duration {
	b.Helper()
	ctx := context.Background()
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
		b.Fatal(err)
	}
	return elapsed
}
