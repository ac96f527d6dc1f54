package dispatcher

import (
	"context"
	"time"

	"github.com/riverqueue/river"

	"github.com/outboxkit/outbox/internal/intentstore"
)

// The history is partitioned by intent id (migration 017): the leader
// makes the id ranges ahead of the sequence, each about a day of recent
// recording, so that retention can drop a range whole
// (intentstore.MakeRanges, DropRanges). An intent recorded past every
// range (a burst faster than this job) goes to the default partition and
// is pruned row by row; nothing fails for want of a range.

// rangesInterval is how often the leader makes ranges ahead: a range
// holds about a day, and the ranges reach a whole range past the last id
// given out, so a burst must record a day's volume within this interval
// to reach the default partition.
const rangesInterval = 5 * time.Minute

type rangesArgs struct{}

func (rangesArgs) Kind() string { return "outbox_ranges" }

func (rangesArgs) InsertOpts() river.InsertOpts {
	// One try: the next interval makes them.
	return river.InsertOpts{Queue: intentstore.DispatchQueue, MaxAttempts: 1}
}

type rangesWorker struct {
	river.WorkerDefaults[rangesArgs]
	d *Dispatcher
}

func (w *rangesWorker) Timeout(*river.Job[rangesArgs]) time.Duration {
	return w.d.config.jobTimeout()
}

func (w *rangesWorker) Work(ctx context.Context, _ *river.Job[rangesArgs]) error {
	made, err := w.d.store.MakeRanges(ctx, intentstore.DefaultRangeRules, w.d.config.Now())
	if made > 0 {
		w.d.config.Logger.InfoContext(ctx, "made id ranges of the history ahead", "ranges", made)
	}
	if err != nil {
		w.d.config.Logger.WarnContext(ctx, "could not make the history's next id range; intents past the last range go to the default partition meanwhile", "error", err)
	}
	return err
}

func (d *Dispatcher) rangesJob() *river.PeriodicJob {
	return river.NewPeriodicJob(river.PeriodicInterval(rangesInterval),
		func() (river.JobArgs, *river.InsertOpts) { return rangesArgs{}, nil },
		&river.PeriodicJobOpts{RunOnStart: true})
}
