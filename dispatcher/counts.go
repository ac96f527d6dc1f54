package dispatcher

import (
	"context"
	"time"

	"github.com/riverqueue/river"

	"github.com/outboxkit/outbox/internal/intentstore"
)

// The leader counts the intents for the readers (outboxd stats, the
// dashboards, the metrics) while counting is slow: a count during a
// backlog reads every unfinished intent, and one count shared by every
// reader costs the database a bounded share of its time however many read
// (intentstore.RefreshCounts decides when to count again).

type countsArgs struct{}

func (countsArgs) Kind() string { return "outbox_counts" }

func (countsArgs) InsertOpts() river.InsertOpts {
	// One try: the next interval's counts again.
	return river.InsertOpts{Queue: intentstore.DispatchQueue, MaxAttempts: 1}
}

type countsWorker struct {
	river.WorkerDefaults[countsArgs]
	d *Dispatcher
}

func (w *countsWorker) Timeout(*river.Job[countsArgs]) time.Duration {
	return w.d.config.jobTimeout()
}

func (w *countsWorker) Work(ctx context.Context, _ *river.Job[countsArgs]) error {
	if _, err := w.d.store.RefreshCounts(ctx); err != nil {
		w.d.config.Logger.WarnContext(ctx, "could not count the intents for the readers; they count themselves meanwhile", "error", err)
		return err
	}
	return nil
}

func (d *Dispatcher) countsJob() *river.PeriodicJob {
	return river.NewPeriodicJob(river.PeriodicInterval(intentstore.CountsRefreshInterval),
		func() (river.JobArgs, *river.InsertOpts) { return countsArgs{}, nil },
		&river.PeriodicJobOpts{RunOnStart: true})
}
