package dispatcher

import (
	"context"
	"fmt"
	"time"

	"github.com/riverqueue/river"

	"github.com/outboxkit/outbox/internal/intentstore"
)

// Pruned is what one retention pass deleted.
type Pruned struct {
	// Markers is how many processed markers older than Config.DedupWindow
	// were deleted. A message redelivered after its marker is gone is
	// handled as a new message.
	Markers int64
	// Intents is how many terminal intents (succeeded, failed, cancelled)
	// that finished more than Config.AuditRetention ago were deleted, each
	// with its attempts and events.
	Intents int64
	// OrderingKeys is how many ordering keys that no unfinished intent
	// holds were forgotten (see intents.Intent.OrderingKey); a key used
	// again starts afresh, in recorded order as before.
	OrderingKeys int64
	// ActivityMinutes is how many minutes of the activity chart's roll-up
	// older than Config.AuditRetention were deleted (see audit's
	// Store.Activity).
	ActivityMinutes int64
}

type retentionArgs struct{}

func (retentionArgs) Kind() string { return "outbox_retention" }

func (retentionArgs) InsertOpts() river.InsertOpts {
	// One try: a pass that fails is repeated at the next interval anyway.
	return river.InsertOpts{Queue: intentstore.DispatchQueue, MaxAttempts: 1}
}

type retentionWorker struct {
	river.WorkerDefaults[retentionArgs]
	d *Dispatcher
}

// Timeout keeps a pass shorter than Config.RescueStuckJobsAfter, so River
// never starts a second pass beside a long one. A pass cut short keeps the
// batches it committed; the next pass goes on from there.
func (w *retentionWorker) Timeout(*river.Job[retentionArgs]) time.Duration {
	return w.d.config.jobTimeout()
}

func (w *retentionWorker) Work(ctx context.Context, _ *river.Job[retentionArgs]) error {
	pruned, err := w.d.PruneOnce(ctx)
	if pruned.Markers > 0 || pruned.Intents > 0 || pruned.OrderingKeys > 0 || pruned.ActivityMinutes > 0 || err != nil {
		attrs := []any{"markers", pruned.Markers, "intents", pruned.Intents, "ordering_keys", pruned.OrderingKeys,
			"activity_minutes", pruned.ActivityMinutes,
			"dedup_window", w.d.config.DedupWindow, "audit_retention", w.d.config.AuditRetention}
		if err != nil {
			w.d.config.Logger.WarnContext(ctx, "retention pass stopped early; the next one goes on", append(attrs, "error", err)...)
		} else {
			w.d.config.Logger.InfoContext(ctx, "retention pass", attrs...)
		}
	}
	return err
}

// retentionJob is the periodic job the leader runs every
// Config.RetentionInterval, and once when it is elected, so a fleet
// redeployed more often than the interval still prunes.
func (d *Dispatcher) retentionJob() *river.PeriodicJob {
	return river.NewPeriodicJob(river.PeriodicInterval(d.config.RetentionInterval),
		func() (river.JobArgs, *river.InsertOpts) { return retentionArgs{}, nil },
		&river.PeriodicJobOpts{RunOnStart: true})
}

// PruneOnce runs one retention pass now: it deletes processed markers older
// than Config.DedupWindow, then terminal intents (succeeded, failed,
// cancelled) that finished more than Config.AuditRetention ago, with their
// attempts and events, then ordering keys no unfinished intent holds, then
// the activity chart's minutes older than Config.AuditRetention.
// Pending, dispatching and in_doubt intents are never deleted, however
// old. Each statement deletes at most Config.RetentionBatch rows in its
// own transaction and is repeated until one comes back short; ages are
// measured on the database's clock. The leader runs a pass every
// Config.RetentionInterval; calling PruneOnce directly as well is safe
// (concurrent passes skip each other's rows). On error the counts say what
// was deleted before it.
func (d *Dispatcher) PruneOnce(ctx context.Context) (Pruned, error) {
	var p Pruned
	var err error
	p.Markers, err = d.pruneBatches(ctx, d.store.PruneMarkers, d.config.DedupWindow)
	if err != nil {
		return p, fmt.Errorf("dispatcher: prune processed markers: %w", err)
	}
	p.Intents, err = d.pruneBatches(ctx, d.store.PruneIntents, d.config.AuditRetention)
	if err != nil {
		return p, fmt.Errorf("dispatcher: prune terminal intents: %w", err)
	}
	p.OrderingKeys, err = d.pruneBatches(ctx, func(ctx context.Context, _ time.Duration, limit int) (int64, error) {
		return d.store.PruneOrderingKeys(ctx, limit)
	}, 0)
	if err != nil {
		return p, fmt.Errorf("dispatcher: prune idle ordering keys: %w", err)
	}
	p.ActivityMinutes, err = d.pruneBatches(ctx, d.store.PruneActivity, d.config.AuditRetention)
	if err != nil {
		return p, fmt.Errorf("dispatcher: prune the activity roll-up: %w", err)
	}
	return p, nil
}

// pruneBatches runs a pruning statement until it deletes fewer rows than a
// batch, and returns how many it deleted.
func (d *Dispatcher) pruneBatches(ctx context.Context, prune func(context.Context, time.Duration, int) (int64, error), olderThan time.Duration) (int64, error) {
	var total int64
	for {
		n, err := prune(ctx, olderThan, d.config.RetentionBatch)
		if err != nil {
			return total, err
		}
		total += n
		if n < int64(d.config.RetentionBatch) {
			return total, nil
		}
	}
}
