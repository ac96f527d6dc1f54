package intentstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/intents/intenttype"
)

// AttemptOutcome is what one claimed attempt came to.
type AttemptOutcome struct {
	Finished    time.Time
	Outcome     string // providers.Outcome
	HTTPStatus  int
	ProviderRef string
	Replayed    bool
	Error       string
}

// Settlement is a decision about an intent, taken from the state the
// dispatcher saw: after a claimed attempt (From dispatching, Attempt set),
// or without a call (From pending: out of attempts, past a key window; From
// in_doubt: a later look-up at the provider).
type Settlement struct {
	// Row is the intent as the decision saw it; with Attempt, it guards the
	// update.
	Row Row
	// From is the state the decision was made from.
	From intenttype.State
	// Attempt is the claimed attempt this settles, with its Outcome; 0 for
	// a decision made without a call.
	Attempt int
	Outcome *AttemptOutcome
	// To is the new state.
	To intenttype.State
	// MayHaveActed records that an attempt may have reached the provider.
	MayHaveActed bool
	// NewGeneration moves the intent to a new key generation: the provider
	// proved the effect absent (or it never saw the old key). Only with To
	// pending.
	NewGeneration bool
	ProviderRef   string
	LastError     string
	// Reason is the event's reason.
	Reason string
	// RecheckAt schedules the next look-up of an in_doubt intent;
	// RecheckCount counts them.
	RecheckAt    *time.Time
	RecheckCount int
	// JobID is the running dispatch job to complete with the settlement,
	// unless the intent still needs it; 0 for none.
	JobID int64
	// Enqueue inserts a dispatch job in the same transaction if the
	// intent is pending after it (a settlement made outside a job).
	Enqueue bool
}

// Settled is what a settlement did.
type Settled struct {
	// Applied is true when the intent moved as the settlement said.
	Applied bool
	// State is the intent's state after the settlement.
	State intenttype.State
}

// Settle records a settlement in one transaction: the attempt's outcome,
// the intent's new state if the guard still holds (see settleSQL), an event,
// and the job's completion. A settlement that meets a transient database
// error is sent again until it lands (its statements are safe to repeat),
// so a known outcome is not lost to one failed commit. When the guard no
// longer holds (the claim was taken over, an operator acted), the attempt is
// still recorded and the intent is left as it is; a success learnt that late
// still settles an in_doubt intent of the same key generation.
func (s *Store) Settle(ctx context.Context, st Settlement) (Settled, error) {
	// Staying put is no transition: a retry under the same key, an in_doubt
	// intent's look-up rescheduled.
	same := st.From == st.To && st.From != intenttype.StateDispatching
	if !same && !intenttype.CanTransition(st.From, st.To, intenttype.ActorDispatcher) {
		return Settled{}, fmt.Errorf("intentstore: the dispatcher may not move an intent from %s to %s", st.From, st.To)
	}
	if st.NewGeneration && st.To != intenttype.StatePending {
		return Settled{}, fmt.Errorf("intentstore: a new key generation goes back to pending, not %s", st.To)
	}
	// The outcome must be recorded even if shutdown cancelled the work.
	ctx = context.WithoutCancel(ctx)
	var out Settled
	err := retryTransient(ctx, func(ctx context.Context) error {
		var err error
		out, err = s.settleOnce(ctx, st)
		return err
	})
	if err != nil {
		return Settled{}, fmt.Errorf("intentstore: settle intent %d: %w", st.Row.ID, err)
	}
	return out, nil
}

func (s *Store) settleOnce(ctx context.Context, st Settlement) (Settled, error) {
	id := st.Row.ID
	var updated, adopted int
	var out Settled
	b := &pgx.Batch{}
	if o := st.Outcome; o != nil && st.Attempt > 0 {
		b.Queue(closeAttemptSQL, pgx.NamedArgs{
			"id": id, "attempt": st.Attempt, "finished_at": o.Finished, "outcome": o.Outcome,
			"http_status": nullInt(o.HTTPStatus), "provider_ref": nullString(o.ProviderRef),
			"replayed": o.Replayed, "error": nullString(o.Error),
		})
	}
	b.Queue(settleSQL, pgx.NamedArgs{
		"id": id, "from": st.From, "to": st.To, "attempt": st.Attempt,
		"seen_attempts": st.Row.AttemptCount, "seen_generation": st.Row.KeyGeneration,
		"may_have_acted": st.MayHaveActed, "new_generation": st.NewGeneration,
		"provider_ref": nullString(st.ProviderRef), "last_error": nullString(st.LastError),
		"recheck_at": st.RecheckAt, "recheck_count": st.RecheckCount, "reason": st.Reason,
	}).QueryRow(func(row pgx.Row) error { return row.Scan(&updated) })
	if st.To == intenttype.StateSucceeded && st.Attempt > 0 {
		// Only when the guard failed does this find an in_doubt intent.
		b.Queue(adoptLateSuccessSQL, pgx.NamedArgs{
			"id": id, "seen_generation": st.Row.KeyGeneration, "provider_ref": nullString(st.ProviderRef),
			"reason": fmt.Sprintf("attempt %d, taken over meanwhile, learnt that the provider performed it", st.Attempt),
		}).QueryRow(func(row pgx.Row) error { return row.Scan(&adopted) })
	}
	s.queueOrderSettled(b, st)
	if st.Enqueue {
		b.Queue(enqueueSQL, s.jobArgs(pgx.NamedArgs{"ids": []int64{id}}))
		b.Queue(notifySQL, pgx.NamedArgs{"notice": s.job.notice})
	}
	if st.JobID != 0 {
		b.Queue(completeJobSQL, pgx.NamedArgs{"job_id": st.JobID, "id": id})
	}
	queueCountFinished(b, st.To, id)
	b.Queue(stateSQL, pgx.NamedArgs{"id": id}).QueryRow(func(row pgx.Row) error { return row.Scan(&out.State) })
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return Settled{}, err
	}
	out.Applied = updated == 1 || adopted == 1
	return out, nil
}

func nullString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func nullInt(n int) *int {
	if n == 0 {
		return nil
	}
	return &n
}
