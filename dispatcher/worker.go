package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/providers"
)

type dispatchWorker struct {
	river.WorkerDefaults[intenttype.DispatchArgs]
	d *Dispatcher
}

func (w *dispatchWorker) Timeout(*river.Job[intenttype.DispatchArgs]) time.Duration {
	return w.d.config.jobTimeout()
}

func (w *dispatchWorker) Work(ctx context.Context, job *river.Job[intenttype.DispatchArgs]) error {
	return w.d.work(ctx, job)
}

// intentRow is what one attempt needs to know about its intent.
type intentRow struct {
	id           int64
	key          string
	kind         string
	provider     string
	payload      json.RawMessage
	state        intenttype.State
	attemptCount int
	createdAt    time.Time
	// resendRequested: an operator resent the intent after checking the
	// effect did not happen; the next attempt goes ahead even past the
	// provider's key window.
	resendRequested bool
}

// settlement is the result of an attempt (or of finding one ambiguous),
// written in one transaction with the job's completion.
type settlement struct {
	fromState    intenttype.State
	state        intenttype.State
	attemptCount int
	providerRef  string
	lastError    string
	reason       string
	attempt      *attemptRecord
	retryAfter   time.Duration
}

type attemptRecord struct {
	number     int
	writeAhead bool // the row exists, opened before the call
	started    time.Time
	finished   time.Time
	outcome    providers.Outcome
	httpStatus int
	ref        string
	replayed   bool
	errText    string
}

func (d *Dispatcher) work(ctx context.Context, job *river.Job[intenttype.DispatchArgs]) error {
	in, err := d.loadIntent(ctx, job.Args.IntentID)
	if errors.Is(err, pgx.ErrNoRows) {
		// Pruned by retention, or never committed: nothing to do.
		d.config.Logger.WarnContext(ctx, "dispatch job for an intent that does not exist", "intent_id", job.Args.IntentID)
		return nil
	}
	if err != nil {
		return err
	}
	if in.state != intenttype.StatePending && in.state != intenttype.StateDispatching {
		return nil // terminal or in_doubt: the row is the system of record
	}
	p, ok := d.config.Providers.ByName(in.provider)
	if !ok {
		d.config.Logger.WarnContext(ctx, "no provider configured for intent; will look again", "intent_id", in.id, "provider", in.provider)
		return river.JobSnooze(time.Minute)
	}
	caps := p.Capabilities()
	req := providers.Request{IntentID: in.id, IdempotencyKey: in.key, Kind: in.kind, Payload: in.payload, Attempt: in.attemptCount + 1}

	if in.state == intenttype.StateDispatching {
		// A write-ahead attempt with no outcome: a dispatcher stopped
		// during the call, and the provider may have acted.
		return d.settleAmbiguous(ctx, job, in, p, req, &attemptRecord{
			number: in.attemptCount, writeAhead: true, finished: time.Now(), outcome: providers.OutcomeAmbiguous,
			errText: "no outcome recorded: the dispatcher stopped during the call",
		}, "the dispatcher stopped during the call")
	}
	if in.attemptCount >= d.config.maxAttemptsFor(in.kind) {
		return d.settle(ctx, job, in, settlement{
			fromState: in.state, state: intenttype.StateFailed, attemptCount: in.attemptCount,
			lastError: fmt.Sprintf("gave up after %d attempts", in.attemptCount), reason: "attempts exhausted",
		})
	}

	if caps.IdempotencyKeys {
		window := caps.KeyWindow - min(d.config.KeyWindowMargin, caps.KeyWindow/2)
		mayHaveActed := (in.attemptCount > 0 || job.Attempt > 1) && !in.resendRequested
		if age := d.config.Now().Sub(in.createdAt); mayHaveActed && age >= window {
			// The provider may have forgotten the key: a repeat could act
			// a second time.
			return d.settleAmbiguous(ctx, job, in, p, req, nil,
				fmt.Sprintf("the provider's key window (%s) has passed since the intent was recorded %s ago", caps.KeyWindow, age.Round(time.Second)))
		}
		started := time.Now()
		res, callErr := d.call(ctx, p, req)
		return d.finishAttempt(ctx, job, in, p, req, &attemptRecord{number: in.attemptCount + 1, started: started}, res, callErr)
	}

	// No key: commit the attempt as started before calling.
	// One statement, so one implicit transaction and one round trip.
	var number int
	err = d.pool.QueryRow(ctx, claimForWriteAheadSQL, in.id, time.Now()).Scan(&number)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // moved on meanwhile (an operator cancelled it)
	}
	if err != nil {
		return fmt.Errorf("dispatcher: write-ahead: %w", err)
	}
	in.state = intenttype.StateDispatching
	in.attemptCount = number
	req.Attempt = number
	started := time.Now()
	res, callErr := d.call(ctx, p, req)
	return d.finishAttempt(ctx, job, in, p, req, &attemptRecord{number: number, writeAhead: true, started: started}, res, callErr)
}

func (d *Dispatcher) call(ctx context.Context, p providers.Provider, req providers.Request) (providers.Result, error) {
	callCtx, cancel := context.WithTimeout(ctx, d.config.CallTimeout)
	defer cancel()
	return p.Perform(callCtx, req)
}

// finishAttempt classifies a call's result and settles the intent.
func (d *Dispatcher) finishAttempt(ctx context.Context, job *river.Job[intenttype.DispatchArgs], in intentRow, p providers.Provider, req providers.Request, att *attemptRecord, res providers.Result, callErr error) error {
	att.finished = time.Now()
	att.httpStatus, att.ref, att.replayed = res.HTTPStatus, res.ProviderRef, res.Replayed
	if callErr == nil {
		att.outcome = providers.OutcomeSucceeded
		return d.settle(ctx, job, in, settlement{
			fromState: in.state, state: intenttype.StateSucceeded, attemptCount: att.number,
			providerRef: res.ProviderRef, attempt: att, reason: replayedReason(res.Replayed),
		})
	}
	classified := providers.Classify(callErr)
	att.outcome, att.errText = classified.Outcome, classified.Error()
	if classified.HTTPStatus != 0 {
		att.httpStatus = classified.HTTPStatus
	}
	s := settlement{fromState: in.state, attemptCount: att.number, lastError: classified.Error(), attempt: att}
	switch classified.Outcome {
	case providers.OutcomeFailed:
		s.state, s.reason = intenttype.StateFailed, "provider refused: "+classified.Error()
	case providers.OutcomeRetry:
		if limit := d.config.maxAttemptsFor(in.kind); att.number >= limit {
			s.state, s.reason = intenttype.StateFailed, "attempts exhausted"
			s.lastError = fmt.Sprintf("gave up after %d attempts; last: %s", att.number, classified.Error())
		} else {
			s.state, s.retryAfter = intenttype.StatePending, classified.RetryAfter
		}
	default:
		in.attemptCount = att.number
		return d.settleAmbiguous(ctx, job, in, p, req, att, classified.Error())
	}
	return d.settle(ctx, job, in, s)
}

// settleAmbiguous reconciles an attempt whose outcome is unknown. Found at
// the provider: succeeded. Otherwise in_doubt, for an operator: the effect
// is never repeated blindly.
func (d *Dispatcher) settleAmbiguous(ctx context.Context, job *river.Job[intenttype.DispatchArgs], in intentRow, p providers.Provider, req providers.Request, att *attemptRecord, why string) error {
	s := settlement{fromState: in.state, attemptCount: in.attemptCount, attempt: att}
	ref, found, note := d.reconcile(ctx, p, req)
	if found {
		s.state, s.providerRef = intenttype.StateSucceeded, ref
		s.reason = "reconciled: the provider has it (" + why + ")"
	} else {
		s.state, s.lastError = intenttype.StateInDoubt, "ambiguous: "+why+"; "+note
		s.reason = s.lastError
	}
	return d.settle(ctx, job, in, s)
}

func (d *Dispatcher) reconcile(ctx context.Context, p providers.Provider, req providers.Request) (ref string, found bool, note string) {
	if !p.Capabilities().CanReconcile {
		return "", false, "the provider cannot be asked"
	}
	callCtx, cancel := context.WithTimeout(ctx, d.config.CallTimeout)
	defer cancel()
	res, found, err := p.Reconcile(callCtx, req)
	switch {
	case err != nil:
		return "", false, "reconcile failed: " + err.Error()
	case !found:
		return "", false, "the provider has no record of it"
	}
	return res.ProviderRef, true, ""
}

// settle writes a settlement: the attempt, the intent's new state, an event
// when the state changes, and, unless another attempt is due, the job's
// completion, all in one transaction. Returning an error after a retry
// settlement lets River schedule the next attempt.
//
// The statements go in one pgx.Batch: one round trip, run by Postgres as
// one implicit transaction (everything up to the batch's Sync), so they
// commit together or not at all. The update locks the intent's row and
// applies only while the intent is still in s.fromState; if an operator is
// moving it at that moment, the update waits for them and then finds the
// state changed, and the intent is left as they put it (the attempt is
// still recorded, for the audit). The later statements, each with a fresh
// snapshot, read the state as the update left it: the job is completed
// (completeJobSQL, as River's JobCompleteTx would complete it) unless the
// intent is pending again.
func (d *Dispatcher) settle(ctx context.Context, job *river.Job[intenttype.DispatchArgs], in intentRow, s settlement) error {
	// The outcome must be recorded even if shutdown cancelled the work.
	ctx = context.WithoutCancel(ctx)
	var (
		current intenttype.State
		updated int
	)
	b := &pgx.Batch{}
	recordEvent := s.state != s.fromState && s.state != intenttype.StatePending
	b.Queue(updateIntentOutcomeSQL, in.id, s.state, s.attemptCount, nullString(s.providerRef), nullString(s.lastError), s.fromState, recordEvent, s.reason).
		QueryRow(func(row pgx.Row) error { return row.Scan(&updated) })
	if a := s.attempt; a != nil {
		if a.writeAhead {
			b.Queue(closeOpenAttemptSQL, in.id, a.number, a.finished, a.outcome, nullInt(a.httpStatus), nullString(a.ref), a.replayed, nullString(a.errText))
		} else {
			b.Queue(insertFinishedAttemptSQL, in.id, a.number, a.started, a.finished, a.outcome, nullInt(a.httpStatus), nullString(a.ref), a.replayed, nullString(a.errText))
		}
	}
	b.Queue(completeJobSQL, job.ID, in.id)
	b.Queue(intentStateSQL, in.id).QueryRow(func(row pgx.Row) error { return row.Scan(&current) })
	err := d.pool.SendBatch(ctx, b).Close()
	if err != nil {
		return fmt.Errorf("dispatcher: record outcome of intent %d: %w", in.id, err)
	}
	// settled: the state changed as s says, for the Observer.
	settled := updated == 1 && s.state != s.fromState
	if updated == 0 {
		d.config.Logger.WarnContext(ctx, "intent changed state during an attempt", "intent_id", in.id, "state", current)
		s.state = current
	}
	d.logSettlement(ctx, job, in.id, s)
	d.observe(in.kind, in.createdAt, s, settled)
	if s.state != intenttype.StatePending {
		return nil
	}
	if s.retryAfter > 0 {
		return river.JobSnooze(s.retryAfter)
	}
	return fmt.Errorf("attempt %d will be retried: %s", s.attemptCount, s.lastError)
}

func (d *Dispatcher) logSettlement(ctx context.Context, job *river.Job[intenttype.DispatchArgs], intentID int64, s settlement) {
	attrs := []any{"intent_id", intentID, "state", s.state, "attempt", s.attemptCount, "job_attempt", job.Attempt}
	if a := s.attempt; a != nil {
		attrs = append(attrs, "outcome", a.outcome, "http_status", a.httpStatus, "replayed", a.replayed)
		if !a.started.IsZero() {
			// An attempt found open after a crash has no known start.
			attrs = append(attrs, "duration", a.finished.Sub(a.started).Round(time.Millisecond))
		}
	}
	if s.lastError != "" {
		attrs = append(attrs, "error", s.lastError)
	}
	d.config.Logger.InfoContext(ctx, "intent attempt settled", attrs...)
}

func (d *Dispatcher) loadIntent(ctx context.Context, id int64) (intentRow, error) {
	var in intentRow
	err := d.pool.QueryRow(ctx, loadIntentSQL, id).Scan(&in.id, &in.key, &in.kind, &in.provider, &in.payload, &in.state, &in.attemptCount, &in.createdAt, &in.resendRequested)
	return in, err
}

func replayedReason(replayed bool) string {
	if replayed {
		return "provider replayed the first response for the key"
	}
	return ""
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
