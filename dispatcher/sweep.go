package dispatcher

import (
	"context"
	"fmt"

	"github.com/riverqueue/river"

	"github.com/outboxkit/outbox/internal/intentstore"
)

const sweepBatch = 500

type sweepArgs struct{}

func (sweepArgs) Kind() string { return "outbox_sweep" }

func (sweepArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: intentstore.DispatchQueue, MaxAttempts: 1}
}

type sweepWorker struct {
	river.WorkerDefaults[sweepArgs]
	d *Dispatcher
}

func (w *sweepWorker) Work(ctx context.Context, _ *river.Job[sweepArgs]) error {
	_, err := w.d.Sweep(ctx)
	return err
}

// Sweep gives River dispatch jobs to the intents nothing would otherwise
// move, in batches, and returns how many. Two kinds:
//
//   - a queued claim older than Config.RescueStuckJobsAfter: its
//     dispatcher stopped during the call, or lost its connection and never
//     came back (a live one settles within its call timeout), so a job
//     takes it over as River's rescuer would a stuck job;
//   - a pending or dispatching intent River holds (not queued), untouched
//     for longer than Config.SweepGrace, that has no live dispatch job
//     (one lost to an operator's job deletion, a discarded job, a bug).
//
// The leader runs it every Config.SweepInterval; calling it directly is
// safe, since dispatch jobs are unique per intent.
func (d *Dispatcher) Sweep(ctx context.Context) (int, error) {
	total := 0
	for {
		n, err := d.store.HandOverStale(ctx, d.config.Now().Add(-d.config.RescueStuckJobsAfter), sweepBatch)
		if err != nil {
			return total, fmt.Errorf("dispatcher: sweep: %w", err)
		}
		if n > 0 {
			d.config.Logger.WarnContext(ctx, "took over queued claims whose dispatcher stopped", "count", n)
		}
		total += n
		if n < sweepBatch {
			break
		}
	}
	for {
		ids, err := d.store.Stranded(ctx, d.config.SweepGrace, sweepBatch)
		if err != nil {
			return total, fmt.Errorf("dispatcher: sweep: %w", err)
		}
		if len(ids) == 0 {
			return total, nil
		}
		if err := d.store.Enqueue(ctx, ids); err != nil {
			return total, fmt.Errorf("dispatcher: sweep: enqueue: %w", err)
		}
		total += len(ids)
		d.config.Logger.WarnContext(ctx, "re-enqueued stranded intents", "count", len(ids), "first_intent_id", ids[0])
		if len(ids) < sweepBatch {
			return total, nil
		}
	}
}
