package dispatcher

import (
	"context"
	"time"

	"github.com/riverqueue/river"

	"github.com/outboxkit/outbox/internal/intentstore"
)

// activityRollUpInterval is how often the leader rolls the finished
// intents up into the activity chart's minutes (migration 009). A chart
// read between two roll-ups rolls up what finished since, so this only
// keeps that read short after a quiet spell.
const activityRollUpInterval = time.Minute

type activityRollUpArgs struct{}

func (activityRollUpArgs) Kind() string { return "outbox_activity_rollup" }

func (activityRollUpArgs) InsertOpts() river.InsertOpts {
	// One try: the next interval's goes on from where this one stopped.
	return river.InsertOpts{Queue: intentstore.DispatchQueue, MaxAttempts: 1}
}

type activityRollUpWorker struct {
	river.WorkerDefaults[activityRollUpArgs]
	d *Dispatcher
}

func (w *activityRollUpWorker) Timeout(*river.Job[activityRollUpArgs]) time.Duration {
	return w.d.config.jobTimeout()
}

// Work rolls up in steps of intentstore.DefaultActivityRollUpLimit until
// it reaches the horizon, each step its own short transaction.
func (w *activityRollUpWorker) Work(ctx context.Context, _ *river.Job[activityRollUpArgs]) error {
	for {
		r, err := w.d.store.RollUpActivity(ctx, 0)
		if err != nil {
			w.d.config.Logger.WarnContext(ctx, "activity roll-up stopped; the next one goes on", "error", err)
			return err
		}
		if !r.Behind {
			return nil
		}
	}
}

func (d *Dispatcher) activityRollUpJob() *river.PeriodicJob {
	return river.NewPeriodicJob(river.PeriodicInterval(activityRollUpInterval),
		func() (river.JobArgs, *river.InsertOpts) { return activityRollUpArgs{}, nil },
		&river.PeriodicJobOpts{RunOnStart: true})
}
