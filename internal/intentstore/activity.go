package intentstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// How the activity chart is counted (migration 009): the intents finished
// in a range of finished_at, [rolled_from, rolled_until), are rolled up
// into one row a minute of outbox_activity_minutes; the chart reads those
// rows and, live, the intents finished outside the range and the
// unfinished ones. Nothing on the hot path writes the roll-up: RollUpActivity
// moves the range's end forward afterwards, up to a horizon before which
// every finishing transaction has ended, so an intent is rolled up once,
// after it finished for good, and never missed.

// DefaultActivityRollUpLimit is the most intents one RollUpActivity step
// reads when its caller passes no limit.
const DefaultActivityRollUpLimit = 50_000

// RolledUp is what one RollUpActivity did.
type RolledUp struct {
	// Intents is how many finished intents it added to the roll-up.
	Intents int64
	// Until is the end of the rolled-up range after it: every intent
	// finished before it is counted in outbox_activity_minutes or before
	// the range's start.
	Until time.Time
	// Behind reports that it stopped at its limit with more finished
	// intents before the horizon: call it again.
	Behind bool
	// Skipped reports that another roll-up held the range: it did nothing.
	Skipped bool
}

// RollUpActivity adds to the activity roll-up the intents finished since
// its range's end, in order of finished_at, at most about limit of them
// (DefaultActivityRollUpLimit when limit ≤ 0; an intent is never split
// from others finished at the same instant), up to the horizon: the start
// of the oldest transaction still running in the database, so that no
// intent finished before the new end can commit after it. It returns at
// once, Skipped, when another roll-up is running. The dispatcher's leader
// calls it every minute, and audit's Activity before each read, so a read
// counts live only what finished since.
func (s *Store) RollUpActivity(ctx context.Context, limit int) (RolledUp, error) {
	if limit <= 0 {
		limit = DefaultActivityRollUpLimit
	}
	var out RolledUp
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var from, horizon time.Time
		err := tx.QueryRow(ctx, activityHorizonSQL).Scan(&from, &horizon)
		if errors.Is(err, pgx.ErrNoRows) {
			out.Skipped = true
			return nil
		}
		if err != nil {
			return err
		}
		out.Until = from
		if !horizon.After(from) {
			return nil
		}
		// A statement after the horizon's: its snapshot sees every
		// transaction the horizon's statement found ended.
		var step *time.Time
		if err := tx.QueryRow(ctx, activityStepSQL, pgx.NamedArgs{"from": from, "limit": limit}).Scan(&step); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		until := horizon
		if step != nil && step.Before(horizon) {
			until, out.Behind = *step, true
		}
		if err := tx.QueryRow(ctx, rollUpActivitySQL, pgx.NamedArgs{"from": from, "until": until}).Scan(&out.Intents); err != nil {
			return err
		}
		out.Until = until
		return nil
	})
	if err != nil {
		return RolledUp{}, fmt.Errorf("intentstore: roll up activity: %w", err)
	}
	return out, nil
}

// PruneActivity deletes up to limit minutes of the activity roll-up older
// than olderThan and returns how many. A chart reaching back past the
// audit retention counts only part of that time, as the intents it
// counted are gone too.
func (s *Store) PruneActivity(ctx context.Context, olderThan time.Duration, limit int) (int64, error) {
	tag, err := s.pool.Exec(ctx, pruneActivitySQL, pgx.NamedArgs{"older_than_us": olderThan.Microseconds(), "limit": limit})
	return tag.RowsAffected(), err
}
