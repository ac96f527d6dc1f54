package intentstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

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
	// JobID is the running River dispatch job the settlement ends,
	// deleted in its transaction unless the intent is still dispatching
	// after it; 0 for none (a queued claim, a look-up).
	JobID int64
	// RetryIn, for a settlement that leaves the intent pending, is how
	// long the next attempt must wait: 0 queues the intent (the
	// dispatchers claim it at once, see ClaimQueued); more gives it to a
	// River dispatch job scheduled that long after the commit, by the
	// database's clock. A queue's claim that the sweep handed to River
	// while its worker was still settling stays River's: its job makes
	// the next attempt (at the retry time: the job is moved to it).
	RetryIn time.Duration
}

// queued says whether the settlement, if it applies, leaves its intent
// queued: pending and due at once.
func (st Settlement) queued() bool { return st.To == intenttype.StatePending && st.RetryIn <= 0 }

// Settled is what a settlement did.
type Settled struct {
	// Applied is true when the intent moved as the settlement said.
	Applied bool
	// State is the intent's state after the settlement.
	State intenttype.State
	// Queued, for a settlement that did not apply, says whether the queue
	// holds the intent now; otherwise it is River's while it is pending
	// or dispatching.
	Queued bool
	// dependentsAppeared: the intent has dependents; with Applied false and
	// a settlement that skipped the release, it is run again with it.
	dependentsAppeared bool
}

// Settle records a settlement in one transaction: the attempt's outcome,
// the intent's new state if the guard still holds (see settleSQL), an event,
// and the job's completion. A settlement that meets a transient database
// error is sent again until it lands (its statements are safe to repeat),
// so a known outcome is not lost to one failed commit. When the guard no
// longer holds (the claim was taken over, an operator acted), the attempt is
// still recorded and the intent is left as it is; a success learnt that late
// still settles the intent of the same key generation, unless it finished
// (in_doubt, pending for a later attempt, or held by a later attempt, whose
// call under the same key can only replay it).
//
// Settlements made at the same time share a transaction (group commit):
// while one is being committed, those that arrive wait and are then
// committed together, in intent id order, each under its own guard, so one
// settlement's guard failing changes nothing for the others. If the group
// fails for a reason other than a transient error, its settlements are
// committed one by one, so one bad settlement cannot hold back the rest.
// Settle ignores ctx's cancellation: an outcome must be recorded even when
// shutdown cancelled the work.
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
	return s.settles.do(context.WithoutCancel(ctx), storableSettlement(st))
}

// maxSettleGroup bounds the settlements committed in one transaction, so
// that none holds many row locks for long.
const maxSettleGroup = 128

// settleGroup commits a group of settlements in one transaction, retried
// while it meets transient errors; a group that fails otherwise falls back
// to one transaction per settlement.
func (s *Store) settleGroup(ctx context.Context, group []*call[Settlement, Settled]) {
	runOrdered(ctx, group, "settle", func(st Settlement) int64 { return st.Row.ID }, s.settleAlone,
		func(ctx context.Context, sorted []*call[Settlement, Settled]) error {
			return s.retryTransient(ctx, func(ctx context.Context) error {
				b := &pgx.Batch{}
				results := make([]*settleResult, len(sorted))
				ids := make([]int64, 0, len(sorted))
				var releasing []int64
				finishes := false
				for i, cl := range sorted {
					results[i] = s.queueSettlement(b, cl.req)
					ids = append(ids, cl.req.Row.ID)
					finishes = finishes || cl.req.To.Terminal()
					if cl.req.releases() {
						releasing = append(releasing, cl.req.Row.ID)
					}
				}
				var count []int64
				if finishes {
					count = ids
				}
				if err := s.sendSettlements(ctx, b, releasing, count); err != nil {
					return err
				}
				// Only now has the transaction committed.
				for i, cl := range sorted {
					cl.res = results[i].settled()
				}
				return nil
			})
		})
	for _, cl := range group {
		if cl.err == nil && !cl.res.Applied {
			if cl.res, cl.err = s.settledState(ctx, cl.req); cl.err != nil {
				cl.err = fmt.Errorf("intentstore: settle intent %d: %w", cl.req.Row.ID, cl.err)
			}
		}
	}
	s.settleAgainWithRelease(ctx, group)
}

// settleAgainWithRelease runs again, alone and with the release, each
// settlement of group whose guard failed only because an intent was
// recorded after its intent since the decision (Settlement.releases): the
// outcome must not be lost for it, nor what now waits for the intent.
func (s *Store) settleAgainWithRelease(ctx context.Context, group []*call[Settlement, Settled]) {
	for _, cl := range group {
		if cl.err != nil || cl.res.Applied || !cl.res.dependentsAppeared || !cl.req.releaseSkipped() {
			continue
		}
		st := cl.req
		st.Row.HasDependents = true
		cl.res, cl.err = s.settleAlone(ctx, st)
	}
}

// settleAlone commits one settlement in a transaction of its own, retried
// while it meets transient errors.
func (s *Store) settleAlone(ctx context.Context, st Settlement) (Settled, error) {
	var out Settled
	err := s.retryTransient(ctx, func(ctx context.Context) error {
		b := &pgx.Batch{}
		res := s.queueSettlement(b, st)
		var releasing, count []int64
		if st.releases() {
			releasing = []int64{st.Row.ID}
		}
		if st.To.Terminal() {
			count = []int64{st.Row.ID}
		}
		if err := s.sendSettlements(ctx, b, releasing, count); err != nil {
			return err
		}
		out = res.settled()
		return nil
	})
	if err == nil && !out.Applied {
		out, err = s.settledState(ctx, st)
	}
	if err != nil {
		return Settled{}, fmt.Errorf("intentstore: settle intent %d: %w", st.Row.ID, err)
	}
	if !out.Applied && out.dependentsAppeared && st.releaseSkipped() {
		st.Row.HasDependents = true
		out, err = s.settleAlone(ctx, st)
		out.dependentsAppeared = false // run with the release: settled as it could be
		return out, err
	}
	return out, nil
}

// sendSettlements commits the settlements queued in b, with, after every
// state is final (a guarded update, or the adoption of a late success),
// the release of what waits for the intents of releasing (releaseTx), then
// one aggregated count of the intents of count the transaction finished.
// Without a release it is one batch, one round trip. With one, BEGIN, the
// settlements and the cascade's first pass go in one batch, and the lock,
// the release, the count and COMMIT in a second: two round trips, and one
// more for each further pass the cascade needs (rare: a chain cancelled
// while a recorder adds to it).
func (s *Store) sendSettlements(ctx context.Context, b *pgx.Batch, releasing, count []int64) error {
	if len(releasing) == 0 {
		if len(count) > 0 {
			queueCount(b, count)
		}
		return s.pool.SendBatch(ctx, b).Close()
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// A connection left inside a transaction (a lost answer, a failed
	// rollback) is closed by Release, never reused.
	defer conn.Release()
	defer func() {
		if conn.Conn().PgConn().TxStatus() != 'I' {
			_, _ = conn.Exec(context.WithoutCancel(ctx), "ROLLBACK")
		}
	}()
	first := &pgx.Batch{}
	first.BeginTx(pgx.TxOptions{})
	first.QueuedQueries = append(first.QueuedQueries, b.QueuedQueries...)
	var followed []int64
	s.queueCascade(first, releasing, &followed)
	br := conn.Conn().SendBatch(ctx, first)
	tx := br.Tx()
	if err := br.Close(); err != nil {
		return err
	}
	if err := s.cascadeFurther(ctx, tx, followed); err != nil {
		return err
	}
	last := &pgx.Batch{}
	s.queueReleaseUnderLocks(last, releasing)
	// After the release: it counts what the release cancelled too.
	queueCount(last, count)
	last.Queue("COMMIT").Exec(func(tag pgconn.CommandTag) error {
		if tag.String() != "COMMIT" {
			return pgx.ErrTxCommitRollback
		}
		return nil
	})
	return tx.SendBatch(ctx, last).Close()
}

// releases says whether the settlement may finish an intent that others
// wait for (an ordering key, or intents recorded after it), so that its
// transaction must release or cancel them (releaseTx). Most intents
// have neither: their settlements run no release statement. A recorder
// that adds a dependent meanwhile sets has_dependents under the row's
// lock, and a settlement that skipped the release then fails its guard
// (settleSQL) and is run again with it (settleAgainWithRelease).
func (st Settlement) releases() bool {
	return st.To.Terminal() && (st.Row.OrderingKey != "" || st.Row.HasDependents)
}

// releaseSkipped: the settlement finishes an intent without the release,
// as releases decided; its guard then requires that no intent was
// recorded after it meanwhile.
func (st Settlement) releaseSkipped() bool { return st.To.Terminal() && !st.releases() }

// settleResult receives what one settlement's statement returns, once the
// batch it was queued in has run.
type settleResult struct {
	updated, adopted int
	to               intenttype.State
}

// settled is what the settlement did, when it applied; otherwise Applied
// is false and settledState reads the rest.
func (r *settleResult) settled() Settled {
	switch {
	case r.updated == 1:
		return Settled{Applied: true, State: r.to}
	case r.adopted == 1:
		return Settled{Applied: true, State: intenttype.StateSucceeded}
	}
	return Settled{}
}

// settledState reads, for a settlement that did not apply, the intent's
// state now and whether an intent was recorded after it meanwhile, or
// that the settlement applied after all: an earlier try of it committed,
// its answer lost.
func (s *Store) settledState(ctx context.Context, st Settlement) (Settled, error) {
	var out Settled
	args := pgx.NamedArgs{"id": st.Row.ID, "to": st.To, "attempt": nil, "finished_at": nil}
	if st.Outcome != nil && st.Outcome.Outcome != "" {
		args["attempt"], args["finished_at"] = st.Attempt, st.Outcome.Finished
	}
	err := s.retryTransient(ctx, func(ctx context.Context) error {
		var mine bool
		err := s.pool.QueryRow(ctx, settledStateSQL, args).Scan(&out.State, &out.Queued, &out.dependentsAppeared, &mine)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // gone: retention pruned it
		}
		if err == nil && mine {
			out = Settled{Applied: true, State: st.To}
		}
		return err
	})
	return out, err
}

// queueSettlement queues the statements of one settlement into b, which is
// sent as one transaction (possibly with other settlements: nothing here
// may depend on being alone in it), and returns where their results will
// be. Every statement a settlement makes belongs here, between its guarded
// update and the read of its resulting state, but the release of what
// waits for the intents it finishes, queued once for all the settlements
// of the transaction, after them (releaseTx).
func (s *Store) queueSettlement(b *pgx.Batch, st Settlement) *settleResult {
	id := st.Row.ID
	res := &settleResult{}
	args := pgx.NamedArgs{
		"id": id, "from": st.From, "to": st.To, "attempt": st.Attempt,
		"seen_attempts": st.Row.AttemptCount, "seen_generation": st.Row.KeyGeneration,
		"may_have_acted": st.MayHaveActed, "new_generation": st.NewGeneration,
		"provider_ref": nullString(st.ProviderRef), "last_error": nullString(st.LastError),
		"recheck_at": st.RecheckAt, "recheck_count": st.RecheckCount, "reason": st.Reason,
		"close_attempt": false, "finished_at": nil, "outcome": nil, "http_status": nil,
		"attempt_provider_ref": nil, "replayed": false, "attempt_error": nil,
		// A take-over closed the attempt for want of an outcome: the
		// outcome, learnt late, replaces that guess, so the attempt row
		// agrees with the intent that adopts it.
		"take_over_prefix": TakeOverPrefix,
		"release_skipped":  st.releaseSkipped(),
		"queued":           st.queued(),
		"job_id":           st.JobID,
	}
	args["archive_attempt"] = false
	if o := st.Outcome; o != nil && st.Attempt > 0 {
		args["close_attempt"], args["finished_at"], args["outcome"] = true, o.Finished, o.Outcome
		args["http_status"], args["attempt_provider_ref"] = nullInt(o.HTTPStatus), nullString(o.ProviderRef)
		args["replayed"], args["attempt_error"] = o.Replayed, nullString(o.Error)
		args["archive_attempt"] = strings.HasPrefix(o.Error, TakeOverPrefix)
	}
	// Only when the guard failed does adopt find the intent unfinished:
	// the outcome, learnt late by an attempt taken over meanwhile, that the
	// provider performed it (a known outcome is never discarded). The
	// intent may be in_doubt, pending for a later attempt, or held by one
	// (whose call, under the same key, can only replay this success).
	adopt := st.To == intenttype.StateSucceeded && st.Attempt > 0
	args["adopt"], args["adopt_reason"], args["superseded_error"] = adopt, "", ""
	if adopt {
		args["adopt_reason"] = fmt.Sprintf("attempt %d, taken over meanwhile, learnt that the provider performed it", st.Attempt)
		args["superseded_error"] = fmt.Sprintf("%s attempt %d, which this one took over, learnt meanwhile that the provider performed the intent", TakeOverPrefix, st.Attempt)
	}
	settleQ.queue(b, args).QueryRow(func(row pgx.Row) error { return row.Scan(&res.updated, &res.adopted) })
	res.to = st.To
	if st.JobID != 0 && st.To != intenttype.StatePending {
		b.Queue(endJobSQL, pgx.NamedArgs{"id": id, "job_id": st.JobID})
	}
	if st.To == intenttype.StatePending {
		s.queuePending(b, st)
	}
	return res
}

// queuePending adds, after a settlement to pending, what gives the intent
// its next attempt, should the settlement have applied (the intent's row,
// pending, was written by this transaction): the queue's notification when
// it is queued; otherwise the end of the running job and a River dispatch
// job scheduled at the retry time, in a statement of its own (the running
// job holds the intent's unique job key until it is deleted).
func (s *Store) queuePending(b *pgx.Batch, st Settlement) {
	args := pgx.NamedArgs{"id": st.Row.ID, "job_id": st.JobID}
	if st.queued() {
		b.Queue(settledQueuedSQL, args)
		return
	}
	b.Queue(endRunningJobSQL, args)
	args["retry_in_us"] = st.RetryIn.Microseconds()
	scheduleRetryQ.queue(b, s.jobArgs(args))
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

// settleSQL moves an intent as a settlement says, only while the guard
// holds: from dispatching, only the attempt that holds the claim; from
// pending or in_doubt, only the state, attempt count and key generation the
// decision was made from. Late or stale settlements change nothing (0 rows).
// With close_attempt, it records the outcome of the claimed attempt it
// settles, in the intent's row with the state (no other row for a first
// attempt); a late outcome (the claim was taken over) is still recorded,
// for the audit, on the attempt in outbox_attempts, where a take-over moves
// it (archive_attempt: a settlement that closes an attempt for want of an
// outcome moves it there at once, so a late one finds it). "May have acted"
// only ever turns on, except with a new key generation (absence proven),
// which also forgets the old key and its window. An event is appended for
// every change of state but the routine ones (an attempt's claim, a retry
// back to pending under the same key) and the success of the attempt that
// holds the claim when the provider answered it so (not reconciled), which
// the row says (outbox_intent_events shows it).
const settleSQL = `
WITH closed AS (
    UPDATE outbox_attempts
    SET finished_at = @finished_at, outcome = @outcome, http_status = @http_status,
        provider_ref = @attempt_provider_ref, replayed = @replayed, error = @attempt_error
    WHERE @close_attempt AND intent_id = @id AND attempt = @attempt
      AND (outcome IS NULL OR (outcome = 'ambiguous' AND starts_with(error, @take_over_prefix)))
),
updated AS (
    UPDATE outbox_intents
    SET state = @to::text,
        claimed_attempt = NULL,
        may_have_acted = (may_have_acted OR @may_have_acted) AND NOT @new_generation,
        key_generation = key_generation + CASE WHEN @new_generation THEN 1 ELSE 0 END,
        provider_key = CASE WHEN @new_generation THEN NULL ELSE provider_key END,
        key_namespace = CASE WHEN @new_generation THEN NULL ELSE key_namespace END,
        key_first_used_at = CASE WHEN @new_generation THEN NULL ELSE key_first_used_at END,
        provider_ref = coalesce(@provider_ref, provider_ref),
        last_error = @last_error,
        recheck_at = @recheck_at,
        recheck_count = @recheck_count,
        queued = @queued AND (queued OR @from::text <> 'dispatching' OR @job_id::bigint <> 0),
        claim_token = NULL,
        attempt_finished_at = CASE WHEN @close_attempt THEN @finished_at ELSE attempt_finished_at END,
        attempt_outcome = CASE WHEN @close_attempt THEN @outcome ELSE attempt_outcome END,
        attempt_http_status = CASE WHEN @close_attempt THEN @http_status ELSE attempt_http_status END,
        attempt_provider_ref = CASE WHEN @close_attempt THEN @attempt_provider_ref ELSE attempt_provider_ref END,
        attempt_replayed = CASE WHEN @close_attempt THEN @replayed ELSE attempt_replayed END,
        attempt_error = CASE WHEN @close_attempt THEN @attempt_error ELSE attempt_error END,
        updated_at = now(),
        finished_at = CASE WHEN @to::text IN ('succeeded', 'failed', 'cancelled') THEN now() END
    WHERE id = @id
      AND state = @from::text
      AND CASE WHEN @from::text = 'dispatching' THEN claimed_attempt = @attempt
               ELSE attempt_count = @seen_attempts AND key_generation = @seen_generation END
      AND NOT (@release_skipped AND has_dependents)
    RETURNING id, attempt_started_at
),
archived AS (
    INSERT INTO outbox_attempts (intent_id, attempt, started_at, finished_at, outcome, http_status, provider_ref, replayed, error)
    SELECT id, @attempt, attempt_started_at, @finished_at, @outcome, @http_status, @attempt_provider_ref, @replayed, @attempt_error
    FROM updated
    WHERE @archive_attempt
    ON CONFLICT (intent_id, attempt) DO NOTHING
),
event AS (
    INSERT INTO outbox_events (intent_id, actor, from_state, to_state, reason)
    SELECT id, 'dispatcher', @from::text, @to::text, @reason
    FROM updated
    WHERE @to::text <> @from::text AND (@to::text <> 'pending' OR @new_generation)
      AND NOT (@from::text = 'dispatching' AND @to::text = 'succeeded' AND @outcome::text = 'succeeded')
),
adoptable AS (
    SELECT state AS was, claimed_attempt FROM outbox_intents
    WHERE @adopt AND id = @id AND state IN ('in_doubt', 'pending', 'dispatching') AND key_generation = @seen_generation
      AND NOT (@release_skipped AND has_dependents)
      AND NOT (state = @from::text AND CASE WHEN @from::text = 'dispatching' THEN claimed_attempt = @attempt
                                            ELSE attempt_count = @seen_attempts END)
),
adopted AS (
    UPDATE outbox_intents i
    SET state = 'succeeded', provider_ref = coalesce(@provider_ref, i.provider_ref), last_error = NULL,
        recheck_at = NULL, queued = false, claimed_attempt = NULL, claim_token = NULL,
        attempt_finished_at = CASE WHEN a.was = 'dispatching' THEN now() ELSE i.attempt_finished_at END,
        attempt_outcome = CASE WHEN a.was = 'dispatching' THEN 'ambiguous' ELSE i.attempt_outcome END,
        attempt_error = CASE WHEN a.was = 'dispatching' THEN @superseded_error ELSE i.attempt_error END,
        updated_at = now(), finished_at = now()
    FROM adoptable a
    WHERE i.id = @id AND i.state = a.was AND i.claimed_attempt IS NOT DISTINCT FROM a.claimed_attempt
    RETURNING i.id, a.was
),
adopted_event AS (
    INSERT INTO outbox_events (intent_id, actor, from_state, to_state, reason)
    SELECT id, 'dispatcher', was, 'succeeded', @adopt_reason FROM adopted
)
SELECT (SELECT count(*) FROM updated), (SELECT count(*) FROM adopted)`

// settledStateSQL reads, in a statement of its own (a snapshot taken once
// the settlement's transaction has ended), what an intent is after a
// settlement that did not apply: its state, whether the queue holds it,
// and whether an intent was recorded after it meanwhile (see
// settleAgainWithRelease). No row: it is gone (retention pruned it).
//
// It also says whether the settlement applied after all: it closed an
// attempt, and the row shows that attempt closed at the settlement's own
// finish time, in the state it settled to. An earlier try of this very
// settlement committed and its answer was lost (the connection dropped
// at the commit, a failover); sent again, its guard failed on its own
// write.
const settledStateSQL = `
SELECT state, queued, has_dependents,
    coalesce(attempt_count = @attempt AND attempt_finished_at = @finished_at AND state = @to::text, false)
FROM outbox_intents
WHERE id = @id`

// endJobSQL deletes, after settleSQL in its transaction, the running River
// dispatch job @job_id that made the attempt, unless the intent still
// needs it (pending, which queuePending decides, or dispatching: another
// attempt holds it), only while the job is running. Deleted rather than
// completed: the intent's row and its attempts are the record, and a
// completed job is only a row with seven indexes written once more (a
// non-HOT update) and deleted a day later by River's cleaner. River's
// completer, run after the worker returns, finds no running job by that id
// and leaves it (its update matches no row).
//
// The job is found by its primary key alone, its state compared as text:
// state = 'running' also matches the leading column of River's fetch index
// (state, queue, priority, scheduled_at, id), and when the statistics were
// taken with no job running (an ANALYZE between two bursts, the rows of a
// quiet queue) the generic plan walks that index instead, through every
// running entry and every dead one a completed job left: 257 buffers a
// settlement instead of 3, measured under load, and half the sustainable
// end-to-end rate.
const endJobSQL = `
DELETE FROM river_job
WHERE id = @job_id AND state::text = 'running'
  AND (SELECT state FROM outbox_intents WHERE id = @id) NOT IN ('pending', 'dispatching')`

// writtenPendingCTE is the intent @id when this transaction's settlement
// moved it to pending: the newest version of its row is this
// transaction's (a settlement whose guard failed wrote nothing).
const writtenPendingCTE = `settled AS (
    SELECT id, queued FROM outbox_intents
    WHERE id = @id AND state = 'pending' AND xmin = pg_current_xact_id()::xid
)`

// settledQueuedSQL ends the job @job_id of a settlement that queued its
// intent (the queue holds it now, and a queued intent has no live job),
// and wakes the dispatchers. The job may be live but no longer running:
// River re-ran it while this settlement's worker still ran (it thought the
// worker stuck), and that run ended with an error (retryable) or a snooze.
// A run of it could not have claimed the intent since, or this settlement
// would not have applied.
const settledQueuedSQL = `
WITH ` + writtenPendingCTE + `,
done AS (
    DELETE FROM river_job
    WHERE id = @job_id AND state::text IN ('running', 'available', 'scheduled', 'retryable')
      AND EXISTS (SELECT 1 FROM settled WHERE queued)
)
SELECT pg_notify(current_schema() || '.` + QueueChannel + `', '') FROM settled WHERE queued`

// endRunningJobSQL ends the running job @job_id of a settlement that
// scheduled a later attempt, before scheduleRetrySQL inserts the job that
// makes it.
const endRunningJobSQL = `
WITH ` + writtenPendingCTE + `
DELETE FROM river_job
WHERE id = @job_id AND state::text = 'running' AND EXISTS (SELECT 1 FROM settled WHERE NOT queued)`

// scheduleRetrySQL gives an intent a settlement left pending for a later
// attempt a River dispatch job, scheduled @retry_in_us microseconds from
// now, as River's InsertManyTx would write it (insertJobsCTE, state
// scheduled): River's scheduler makes it available then. An intent whose
// job is live already (the sweep handed a queue's claim to River while its
// worker settled) has that job moved to the retry time, unless it runs.
var scheduleRetrySQL = `
WITH ` + writtenPendingCTE + `,
inserted AS (
    SELECT id FROM settled WHERE NOT queued
),
` + scheduledJobsCTE + `
SELECT count(*) FROM inserted`
