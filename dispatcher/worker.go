package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/internal/intentstore"
	"github.com/outboxkit/outbox/providers"
)

type dispatchWorker struct {
	river.WorkerDefaults[intentstore.DispatchArgs]
	d *Dispatcher
}

// Timeout is an attempt's bound and the longest wait for one of the
// dispatcher's workers: waiting for a worker must not shorten the call
// (a call cut short after its request left is ambiguous).
func (w *dispatchWorker) Timeout(*river.Job[intentstore.DispatchArgs]) time.Duration {
	return w.d.config.jobTimeout() + w.d.config.workerWait()
}

// workerBusySnooze is how soon a job that found no free worker is run again.
const workerBusySnooze = time.Second

func (w *dispatchWorker) Work(ctx context.Context, job *river.Job[intentstore.DispatchArgs]) error {
	// One of the dispatcher's workers, shared with the queue; none free
	// within workerWait: the job runs again soon (a snooze spends none of
	// its attempts).
	waitCtx, cancel := context.WithTimeout(ctx, w.d.config.workerWait())
	got := w.d.workers.acquire(waitCtx, 1)
	cancel()
	if got == 0 {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return river.JobSnooze(workerBusySnooze)
	}
	defer w.d.workers.release(1)
	ctx, cancelWork := context.WithTimeout(ctx, w.d.config.jobTimeout())
	defer cancelWork()
	return w.d.work(ctx, job.ID, job.Args.IntentID)
}

// claimLostSnooze asks River to run the job again soon: the intent moved
// between its load and its claim, and the next run looks afresh.
const claimLostSnooze = time.Second

// work decides and carries out the next step for one intent. Every decision
// is taken from the intent's row alone (never from River's job): the row's
// state, its one attempt counter and budget, whether an attempt may have
// acted, and when its key was first used.
//
// The common case, a pending intent nothing has yet made doubtful, is
// claimed in the statement that loads it: intentstore.ClaimRules.
// AttemptsAtOnce says when, and holds only where nextMove would attempt.
func (d *Dispatcher) work(ctx context.Context, jobID, intentID int64) error {
	now := d.claimTime()
	loaded, err := d.store.LoadClaim(ctx, intentID, d.rules, now)
	if errors.Is(err, pgx.ErrNoRows) {
		// Pruned by retention, or never committed: nothing to do.
		d.config.Logger.WarnContext(ctx, "dispatch job for an intent that does not exist", "intent_id", intentID)
		return nil
	}
	if err != nil {
		return d.releaseUnsent(context.WithoutCancel(ctx), []int64{intentID}, err)
	}
	row := loaded.Row
	if row.Queued {
		// The queue holds it (ClaimQueued claims it, or its claimer is
		// calling the provider): a River job never works a queued intent.
		return nil
	}
	if loaded.Claim != nil {
		p, _ := d.config.Providers.ByName(row.Provider) // the rules name only providers served here
		st := step{d: d, jobID: jobID, row: row, p: p}
		return st.perform(ctx, *loaded.Claim)
	}
	if row.State != intenttype.StatePending && row.State != intenttype.StateDispatching {
		return nil // terminal or in_doubt: the row is the system of record
	}
	p, ok := d.config.Providers.ByName(row.Provider)
	if !ok {
		d.config.Logger.WarnContext(ctx, "no provider configured for intent; will look again", "intent_id", row.ID, "provider", row.Provider)
		return river.JobSnooze(time.Minute)
	}
	caps := p.Capabilities()
	st := step{d: d, jobID: jobID, row: row, p: p}
	switch d.nextMove(row, caps, now) {
	case moveAttempt:
		return st.attempt(ctx)
	case moveTakeOverAmbiguous:
		// An attempt holds the intent and never settled, and may not be
		// repeated: outside the key window, or past the budget.
		why := fmt.Sprintf("attempt %d has no outcome: its dispatcher stopped during the call, or its outcome was lost", row.ClaimedAttempt)
		switch {
		case caps.IdempotencyKeys && d.withinKeyWindow(caps, row.KeyFirstUsedAt, now):
			why += fmt.Sprintf(", and its %d attempts are used", row.AttemptsUsed())
		case caps.IdempotencyKeys:
			why += fmt.Sprintf(", and the provider's key window (%s) has passed since the key was first used", caps.KeyWindow)
		}
		return st.settle(ctx, st.ambiguous(ctx, intenttype.StateDispatching, row.ClaimedAttempt, &intentstore.AttemptOutcome{
			Finished: now, Outcome: string(providers.OutcomeAmbiguous), Error: intentstore.TakeOverPrefix + " " + why,
		}, why, false))
	case moveExhaustedInDoubt:
		return st.settle(ctx, st.ambiguous(ctx, intenttype.StatePending, 0, nil,
			fmt.Sprintf("%d attempts used, and an earlier one may have reached the provider", row.AttemptsUsed()), false))
	case moveExhaustedFailed:
		return st.settle(ctx, decision{Settlement: intentstore.Settlement{
			Row: row, From: intenttype.StatePending, To: intenttype.StateFailed,
			LastError: fmt.Sprintf("gave up after %d attempts", row.AttemptsUsed()), Reason: "attempts exhausted", JobID: jobID,
		}})
	default: // moveWindowPassed
		return st.settle(ctx, st.ambiguous(ctx, intenttype.StatePending, 0, nil,
			fmt.Sprintf("the provider's key window (%s) has passed since the key was first used %s ago, after an attempt that may have reached it",
				caps.KeyWindow, now.Sub(row.KeyFirstUsedAt).Round(time.Second)), true))
	}
}

// move is what a worker does with a pending or dispatching intent it
// loaded and did not claim.
type move int

const (
	// moveAttempt: claim it and call the provider (pending, or a take-over
	// of an attempt that never settled, under the same key, inside the key
	// window and the budget).
	moveAttempt move = iota
	// moveTakeOverAmbiguous: an attempt that never settled, which may not
	// be repeated: closed ambiguous, and the intent reconciled.
	moveTakeOverAmbiguous
	// moveExhaustedInDoubt: the budget is used and an attempt may have
	// acted: reconciled, never failed.
	moveExhaustedInDoubt
	// moveExhaustedFailed: the budget is used and no attempt may have
	// acted.
	moveExhaustedFailed
	// moveWindowPassed: an attempt may have acted and the provider may
	// have forgotten its key: a repeat could act a second time (DESIGN.md,
	// invariant 8), so it is reconciled instead.
	moveWindowPassed
)

// nextMove decides, from the intent's row alone, what to do with a pending
// or dispatching intent. intentstore.ClaimRules.AttemptsAtOnce holds only
// for rows this answers moveAttempt for (TestAttemptsAtOnceIsAnAttempt):
// those are claimed in the statement that loads them.
func (d *Dispatcher) nextMove(row intentstore.Row, caps providers.Capabilities, now time.Time) move {
	limit := d.config.maxAttemptsFor(row.Kind)
	if row.State == intenttype.StateDispatching {
		// Its dispatcher stopped during the call, or the settlement was
		// lost: the provider may have acted. A take-over is an attempt
		// like any other: it spends the budget, and none is made past it
		// (DESIGN.md, invariant 14), or a settlement that always fails
		// would call the provider on every job run.
		inWindow := caps.IdempotencyKeys && d.withinKeyWindow(caps, row.KeyFirstUsedAt, now)
		if inWindow && row.AttemptsUsed() < limit {
			return moveAttempt // the same key: the provider answers a repeat with the first result
		}
		return moveTakeOverAmbiguous
	}
	switch {
	case row.AttemptsUsed() >= limit && row.MayHaveActed:
		return moveExhaustedInDoubt
	case row.AttemptsUsed() >= limit:
		return moveExhaustedFailed
	case caps.IdempotencyKeys && row.MayHaveActed && !d.withinKeyWindow(caps, row.KeyFirstUsedAt, now):
		return moveWindowPassed
	}
	return moveAttempt
}

// withinKeyWindow reports whether a key first used at firstUsed (zero: not
// yet) is still remembered by the provider, less Config.KeyWindowMargin.
func (d *Dispatcher) withinKeyWindow(caps providers.Capabilities, firstUsed, now time.Time) bool {
	if firstUsed.IsZero() {
		return true
	}
	window := caps.KeyWindow - min(d.config.KeyWindowMargin, caps.KeyWindow/2)
	return now.Sub(firstUsed) < window
}

// step is one worker's handling of one intent.
type step struct {
	d     *Dispatcher
	jobID int64
	row   intentstore.Row
	p     providers.Provider
	// started is when the claimed attempt's call began.
	started time.Time
}

func (s *step) request() providers.Request {
	return providers.Request{
		IntentID: s.row.ID, Namespace: s.row.Namespace, IdempotencyKey: s.row.ProviderKey,
		KeyFirstUsedAt: s.row.KeyFirstUsedAt, Kind: s.row.Kind, Payload: s.row.Payload, Attempt: s.row.AttemptCount,
	}
}

// attempt claims the intent, calls the provider and settles the outcome,
// in the attempt's span.
func (s *step) attempt(ctx context.Context) error {
	d := s.d
	now := d.claimTime() // each claim its own instant (see ReleaseUnsent)
	claim, err := d.store.Claim(ctx, intentstore.ClaimParams{
		Row:         s.row,
		ProviderKey: intenttype.ProviderKey(d.namespace, s.row.KeyGeneration, s.row.Key, s.p.Capabilities().MaxKeyLength),
		Namespace:   d.namespace,
		Now:         now,
	})
	if errors.Is(err, intentstore.ErrClaimLost) {
		_, span := d.startAttempt(ctx, s.row, s.p.Name())
		span.SetAttributes(attrOutcome.String(outcomeClaimLost))
		span.End()
		return river.JobSnooze(claimLostSnooze)
	}
	if err != nil {
		_, span := d.startAttempt(ctx, s.row, s.p.Name())
		spanError(span, err.Error())
		span.End()
		return d.releaseUnsent(context.WithoutCancel(ctx), []int64{s.row.ID}, err)
	}
	return s.perform(ctx, claim)
}

// releaseUnsent follows a claim whose answer never came (err): it may have
// committed, and this worker knows it did not call the provider, so it
// says so once the database answers again (until ctx ends), instead of
// leaving attempts that read as stopped during their call (DESIGN.md,
// invariant 15). ids are the intents it may have claimed; nil: unknown (a
// batch of the queue). It returns err: River runs the job again; the queue
// claims the released intents again.
func (d *Dispatcher) releaseUnsent(ctx context.Context, ids []int64, err error) error {
	released, relErr := d.store.ReleaseUnsent(ctx, ids, err, "not called: the claim's answer was lost ("+err.Error()+")")
	switch {
	case relErr != nil:
		d.config.Logger.WarnContext(ctx, "could not release a claim whose answer was lost", "intent_ids", ids, "error", relErr)
	case released > 0:
		d.config.Logger.InfoContext(ctx, "released a claim whose answer was lost; the provider was not called", "intent_ids", ids, "released", released)
	}
	return err
}

// perform calls the provider under claim, committed, and settles the
// outcome, in the attempt's span.
func (s *step) perform(ctx context.Context, claim intentstore.Claim) error {
	d := s.d
	ctx, span := d.startAttempt(ctx, s.row, s.p.Name())
	defer span.End()
	span.SetAttributes(attrAttempt.Int(claim.Attempt))
	tookOver := s.row.State == intenttype.StateDispatching
	s.row.State, s.row.ClaimedAttempt, s.row.AttemptCount = intenttype.StateDispatching, claim.Attempt, claim.Attempt
	s.row.ProviderKey, s.row.Namespace, s.row.KeyFirstUsedAt = claim.ProviderKey, claim.Namespace, claim.KeyFirstUsedAt
	s.row.MayHaveActed = s.row.MayHaveActed || tookOver
	s.started = d.config.Now()
	res, callErr := d.call(ctx, s.p, s.request())
	dec := s.classify(ctx, res, callErr)
	endAttempt(span, dec)
	err := s.settle(ctx, dec)
	if err != nil {
		spanError(span, err.Error())
	}
	return err
}

func (d *Dispatcher) call(ctx context.Context, p providers.Provider, req providers.Request) (providers.Result, error) {
	callCtx, cancel := context.WithTimeout(ctx, d.config.CallTimeout)
	defer cancel()
	return p.Perform(callCtx, req)
}

// classify turns a call's result into a settlement of the claimed attempt.
func (s *step) classify(ctx context.Context, res providers.Result, callErr error) decision {
	out := &intentstore.AttemptOutcome{Finished: s.d.config.Now(), HTTPStatus: res.HTTPStatus, ProviderRef: res.ProviderRef, Replayed: res.Replayed}
	attempt := s.row.ClaimedAttempt
	if callErr == nil {
		out.Outcome = string(providers.OutcomeSucceeded)
		return decision{Settlement: intentstore.Settlement{
			Row: s.row, From: intenttype.StateDispatching, Attempt: attempt, Outcome: out, To: intenttype.StateSucceeded,
			MayHaveActed: true, ProviderRef: res.ProviderRef, Reason: replayedReason(res.Replayed), JobID: s.jobID,
		}}
	}
	ae := providers.Classify(callErr)
	out.Outcome, out.Error = string(ae.Outcome), ae.Error()
	if ae.HTTPStatus != 0 {
		out.HTTPStatus = ae.HTTPStatus
	}
	earlier := s.row.MayHaveActed // an earlier attempt may have reached the provider
	mayHaveActed := earlier || ae.MayHaveActed()
	limit := s.d.config.maxAttemptsFor(s.row.Kind)
	switch {
	case ae.Outcome == providers.OutcomeFailed && !earlier:
		return decision{Settlement: intentstore.Settlement{
			Row: s.row, From: intenttype.StateDispatching, Attempt: attempt, Outcome: out, To: intenttype.StateFailed,
			MayHaveActed: ae.MayHaveActed(), LastError: ae.Error(), Reason: "provider refused: " + ae.Error(), JobID: s.jobID,
		}}
	case ae.Outcome == providers.OutcomeFailed:
		// A refusal now does not undo what an earlier attempt may have done
		// (a rolled key answers 401 to the retry of a charge that went
		// through): only the provider's own records can tell.
		return s.ambiguous(ctx, intenttype.StateDispatching, attempt, out, "refused ("+ae.Error()+") after an earlier attempt that may have reached the provider", providerFinished(ae))
	case ae.Outcome == providers.OutcomeRetry && s.row.AttemptCount-s.row.BudgetFrom < limit:
		return decision{Settlement: intentstore.Settlement{
			Row: s.row, From: intenttype.StateDispatching, Attempt: attempt, Outcome: out, To: intenttype.StatePending,
			MayHaveActed: mayHaveActed, LastError: ae.Error(), JobID: s.jobID,
			RetryIn: s.d.retryDelay(s.row.AttemptCount-s.row.BudgetFrom, ae.RetryAfter),
		}}
	case ae.Outcome == providers.OutcomeRetry && !mayHaveActed:
		return decision{Settlement: intentstore.Settlement{
			Row: s.row, From: intenttype.StateDispatching, Attempt: attempt, Outcome: out, To: intenttype.StateFailed,
			LastError: fmt.Sprintf("gave up after %d attempts; last: %s", s.row.AttemptCount-s.row.BudgetFrom, ae.Error()),
			Reason:    "attempts exhausted", JobID: s.jobID,
		}}
	case ae.Outcome == providers.OutcomeRetry:
		return s.ambiguous(ctx, intenttype.StateDispatching, attempt, out,
			fmt.Sprintf("%d attempts used (last: %s), and one may have reached the provider", s.row.AttemptCount-s.row.BudgetFrom, ae.Error()), providerFinished(ae))
	}
	return s.ambiguous(ctx, intenttype.StateDispatching, attempt, out, ae.Error(), providerFinished(ae))
}

// providerFinished reports whether an error is the provider's own answer
// for the request, which it gives only once it has finished with the key:
// a 500 (Stripe saves and replays it) or a refusal. A 409 (the key is in
// use by a request still executing), a 429 or 503 from the edge, and no
// response at all prove nothing about requests still in progress.
func providerFinished(ae *providers.AttemptError) bool {
	switch st := ae.HTTPStatus; {
	case st == 500:
		return true
	case st >= 400 && st < 500:
		return st != 409 && st != 429
	}
	return false
}

// settledSince reports whether AbsenceSettleTime has passed since t (the
// latest attempt's claim; zero: there was none).
func (d *Dispatcher) settledSince(t time.Time) bool {
	return t.IsZero() || d.config.Now().Sub(t) >= d.config.AbsenceSettleTime
}

// decision is a settlement as the worker decided it.
type decision struct {
	intentstore.Settlement
}

// retryDelay is how long an intent that used attempts of its budget waits
// for the next: the provider's Retry-After when it gave one, otherwise
// Config.RetryBackoff doubled for each attempt after the first, at most
// Config.RetryBackoffMax, with ±20% jitter so that intents failing
// together do not retry together.
func (d *Dispatcher) retryDelay(attempts int, retryAfter time.Duration) time.Duration {
	if retryAfter > 0 {
		return retryAfter
	}
	delay := d.config.RetryBackoff
	for i := 1; i < attempts && delay < d.config.RetryBackoffMax; i++ {
		delay *= 2
	}
	delay = min(delay, d.config.RetryBackoffMax)
	return time.Duration(float64(delay) * (0.8 + 0.4*rand.Float64()))
}

// ambiguous decides an intent whose effect may have happened, from the
// state it is in (from) with the attempt's outcome if there was one: it asks
// the provider and settles by what the provider proves. answered says the
// provider's API finished with the latest request (it answered for the key),
// so no request can still be executing there and a proven absence may be
// acted on now; otherwise only once Config.AbsenceSettleTime has passed
// since the latest attempt.
func (s *step) ambiguous(ctx context.Context, from intenttype.State, attempt int, out *intentstore.AttemptOutcome, why string, answered bool) decision {
	st := intentstore.Settlement{Row: s.row, From: from, Attempt: attempt, Outcome: out, MayHaveActed: true, JobID: s.jobID}
	v := s.d.reconcile(ctx, s.p, s.request(), answered || s.d.settledSince(s.row.LastAttemptAt))
	s.d.apply(&st, v, why)
	return decision{Settlement: st}
}

// settle records a decision: the intent's next attempt, if it needs one,
// is the settlement's too (queued at once, or a River job at its retry
// time: Settlement.RetryIn), so nothing is left for River to retry.
func (s *step) settle(ctx context.Context, dec decision) error {
	d := s.d
	res, err := d.store.Settle(ctx, dec.Settlement)
	if err != nil {
		return err
	}
	if !res.Applied {
		d.config.Logger.WarnContext(ctx, "intent changed during the attempt; its outcome is recorded, the state left as it is",
			"intent_id", s.row.ID, "attempt", dec.Attempt, "state", res.State)
	}
	d.logSettlement(ctx, s, dec, res)
	d.observe(s.row.Kind, s.row.CreatedAt, s.started, dec.Settlement, res.Applied)
	if !res.Applied && s.jobID != 0 && !res.Queued &&
		(res.State == intenttype.StatePending || res.State == intenttype.StateDispatching) {
		// Another attempt holds the intent, or left it for a later one, and
		// this job may be the one that made it: River re-runs a job whose
		// worker it thought stuck while that worker still runs (this one).
		// Returning nil would have River complete the job under the other
		// run, and an intent whose claimer then died would have no job to
		// take it over. Snoozed, the job looks again when River would have
		// rescued it; the claim has settled by then unless its claimer died.
		return river.JobSnooze(d.config.RescueStuckJobsAfter)
	}
	return nil
}

func (d *Dispatcher) logSettlement(ctx context.Context, s *step, dec decision, res intentstore.Settled) {
	attrs := []any{"intent_id", s.row.ID, "state", res.State, "attempt", dec.Attempt}
	if o := dec.Outcome; o != nil {
		attrs = append(attrs, "outcome", o.Outcome, "http_status", o.HTTPStatus, "replayed", o.Replayed)
		if !s.started.IsZero() {
			attrs = append(attrs, "duration", o.Finished.Sub(s.started).Round(time.Millisecond))
		}
	}
	if dec.LastError != "" {
		attrs = append(attrs, "error", dec.LastError)
	}
	d.config.Logger.InfoContext(ctx, "intent attempt settled", attrs...)
}

func replayedReason(replayed bool) string {
	if replayed {
		return "provider replayed the first response for the key"
	}
	return ""
}
