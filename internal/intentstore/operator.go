package intentstore

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxkit/outbox/intents/intenttype"
)

// OperatorAction is one operator action, already validated by the caller
// (package audit checks actor and reason).
type OperatorAction struct {
	Kind     intenttype.ActionKind
	IntentID int64
	// To is the state Resolve settles the intent in.
	To intenttype.State
	// Actor is recorded in the event as given ("operator:ann").
	Actor  string
	Reason string
	// IfState makes the action conditional on the intent still being in
	// that state when its row is locked; IfVersion, at that version.
	IfState   intenttype.State
	IfVersion *intenttype.Version
	// ActionID identifies the action: an intent whose events already hold
	// it has had it applied, and Act returns nil without applying it again
	// (a retry after a lost commit acknowledgement). Empty: no identity,
	// and Act does not retry a resend (see Act).
	ActionID string
	// ProviderRef, for a resolve as succeeded, is set as the intent's
	// provider reference (what intents after it fill from) and named in
	// the event's reason.
	ProviderRef string
}

// Act carries out an operator action in one transaction: it locks the
// intent's row, checks the transition against the state diagram and the
// guards, updates the intent, appends an event with the actor and reason,
// and for a resend enqueues the dispatch job (not worked before the commit,
// gone if it rolls back). It returns intenttype.ErrNotFound, a *intenttype.TransitionError, or a
// database error; in every error case nothing is changed.
//
// An intent in flight (dispatching) is refused: the operator waits for the
// attempt's outcome. A pending intent that an earlier attempt may have
// reached the provider for (a keyed intent waiting for its retry) cannot be
// cancelled: the provider may have acted, so it can only end as succeeded,
// or in_doubt for an operator to resolve.
//
// An action that finishes an intent (cancel, resolve) decides, in the same
// transaction, the intents waiting for it (see order.go): released or
// cancelled, as a settlement would.
//
// With an ActionID, an action already applied to the intent is not applied
// again (nil, nothing changed), so Act retries it on transient errors: a
// commit whose acknowledgement was lost is found applied, not resent.
// Without one it is run once: a retry could not tell a lost commit from a
// failed one, and a resend is not idempotent.
func (s *Store) Act(ctx context.Context, a OperatorAction) error {
	allowed := a.Kind.AllowedFrom()
	if allowed == nil {
		return fmt.Errorf("intentstore: unknown action %q", a.Kind)
	}
	if a.ActionID == "" {
		return s.act(ctx, a, allowed)
	}
	// Taking a waiting intent's ordering key can meet a settlement of the
	// same key in a deadlock PostgreSQL breaks: the action is run again.
	return s.retryTransient(ctx, func(ctx context.Context) error { return s.act(ctx, a, allowed) })
}

// errApplied rolls back an action whose event, inserted by a concurrent
// run of the same action, is already there.
var errApplied = errors.New("intentstore: the action was applied meanwhile")

func (s *Store) act(ctx context.Context, a OperatorAction, allowed []intenttype.State) error {
	err := s.actTx(ctx, a, allowed)
	if errors.Is(err, errApplied) {
		return nil
	}
	return err
}

func (s *Store) actTx(ctx context.Context, a OperatorAction, allowed []intenttype.State) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		seen, err := lockForAction(ctx, tx, a)
		if err != nil || seen.applied {
			return err // applied: this action's event is there
		}
		to, err := a.target(seen, allowed)
		if err != nil {
			return err
		}
		if err := s.apply(ctx, tx, a, seen.state, to); err != nil {
			return err
		}
		if a.Kind == intenttype.ActionResend {
			_, err := tx.Exec(ctx, queueNotifySQL)
			return err
		}
		if to.Terminal() && seen.waitedFor {
			if err := s.releaseTx(ctx, tx, []int64{a.IntentID}); err != nil {
				return err
			}
		}
		// After the release: it counts what the release cancelled too.
		b := &pgx.Batch{}
		queueCountFinished(b, to, a.IntentID)
		return tx.SendBatch(ctx, b).Close()
	})
}

// actedOn is an intent as an operator's action found it under its row
// lock.
type actedOn struct {
	state        intenttype.State
	mayHaveActed bool
	version      intenttype.Version
	// applied: the action's event is there already (its identity).
	applied bool
	// waitedFor: it has an ordering key or intents recorded after it, read
	// under the row lock (a recorder sets has_dependents under it too).
	waitedFor bool
}

func lockForAction(ctx context.Context, tx pgx.Tx, a OperatorAction) (actedOn, error) {
	var seen actedOn
	err := tx.QueryRow(ctx, lockForOperatorSQL, pgx.NamedArgs{"id": a.IntentID}).
		Scan(&seen.state, &seen.mayHaveActed, &seen.version.KeyGeneration, &seen.version.AttemptCount, &seen.waitedFor)
	if errors.Is(err, pgx.ErrNoRows) {
		return seen, fmt.Errorf("%w: no intent has id %d", intenttype.ErrNotFound, a.IntentID)
	}
	if err != nil || a.ActionID == "" {
		return seen, err
	}
	err = tx.QueryRow(ctx, actionAppliedSQL, pgx.NamedArgs{"id": a.IntentID, "action_id": a.ActionID}).Scan(&seen.applied)
	return seen, err
}

// target is the state a moves the intent it found as seen to, or the
// *intenttype.TransitionError that refuses it: changed since the operator
// saw it, in a state the action is not allowed from (an attempt in flight
// among them), or, for a cancel, after an attempt that may have acted.
func (a OperatorAction) target(seen actedOn, allowed []intenttype.State) (intenttype.State, error) {
	refuse := &intenttype.TransitionError{IntentID: a.IntentID, From: seen.state, Action: string(a.Kind), Allowed: allowed}
	switch {
	case a.IfVersion != nil && *a.IfVersion != seen.version:
		refuse.Seen, refuse.Now = a.IfVersion, seen.version
		return "", refuse
	case a.IfState != "" && seen.state != a.IfState:
		refuse.Expected = a.IfState
		return "", refuse
	case !slices.Contains(allowed, seen.state):
		if seen.state == intenttype.StateDispatching {
			refuse.Why = "an attempt is in flight: wait for its outcome"
		}
		return "", refuse
	case a.Kind == intenttype.ActionCancel && seen.mayHaveActed:
		refuse.Why = "an earlier attempt may have reached the provider, so it cannot be cancelled as if nothing happened: it will end succeeded, or in_doubt for an operator to resolve"
		return "", refuse
	case a.Kind == intenttype.ActionResend && seen.state == intenttype.StateFailed && seen.mayHaveActed:
		refuse.Why = "an attempt may have reached the provider before it was resolved failed: a resend could perform it twice"
		return "", refuse
	case a.Kind == intenttype.ActionResend && seen.state == intenttype.StateFailed && seen.waitedFor:
		refuse.Why = "intents were recorded after it (their turn came, or they were cancelled with it): sending it again now would break their order; record it anew"
		return "", refuse
	}
	to := intenttype.StateCancelled
	switch a.Kind {
	case intenttype.ActionResend:
		to = intenttype.StatePending
	case intenttype.ActionResolve:
		to = a.To
	}
	if !intenttype.CanTransition(seen.state, to, intenttype.ActorOperator) {
		return "", refuse
	}
	return to, nil
}

// apply moves the intent from to to and appends the action's event, with
// its identity: errApplied when the same action, run at once elsewhere,
// committed its event first (the lock's snapshot could not show it).
func (s *Store) apply(ctx context.Context, tx pgx.Tx, a OperatorAction, from, to intenttype.State) error {
	// Only a resolve as succeeded sets the provider's reference.
	var ref *string
	if a.ProviderRef != "" && to == intenttype.StateSucceeded {
		ref = &a.ProviderRef
	}
	var err error
	if a.Kind == intenttype.ActionResend {
		b := &pgx.Batch{}
		if from.Terminal() {
			// Finished no longer: its finished count goes first, while the
			// row still says failed.
			b.Queue(uncountFinishedSQL, pgx.NamedArgs{"id": a.IntentID})
		}
		b.Queue(resendSQL, pgx.NamedArgs{"id": a.IntentID})
		err = tx.SendBatch(ctx, b).Close()
	} else {
		_, err = tx.Exec(ctx, finishSQL, pgx.NamedArgs{"id": a.IntentID, "to": to, "provider_ref": ref})
	}
	if err != nil {
		return err
	}
	reason := a.Reason
	if ref != nil {
		reason += fmt.Sprintf(" (provider reference set: %s)", *ref)
	}
	_, err = tx.Exec(ctx, insertEventSQL, pgx.NamedArgs{"id": a.IntentID, "actor": a.Actor, "from": from, "to": to, "reason": reason, "action_id": nullString(a.ActionID)})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.ConstraintName == "outbox_events_action_idx" {
		return errApplied
	}
	return err
}

// RecordReveal appends to the intent's event log that actor was shown its
// unredacted payload, and why: an event whose from and to states are both
// the intent's current state, with reason intenttype.RevealReasonPrefix+reason. The
// intent itself is not changed. The caller validates actor and reason.
// No such intent: intenttype.ErrNotFound.
func (s *Store) RecordReveal(ctx context.Context, id int64, actor, reason string) (intenttype.State, error) {
	var state intenttype.State
	err := s.pool.QueryRow(ctx, insertRevealEventSQL, pgx.NamedArgs{"id": id, "actor": actor, "reason": intenttype.RevealReasonPrefix + reason}).Scan(&state)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("%w: no intent has id %d", intenttype.ErrNotFound, id)
	}
	return state, err
}

// lockForOperatorSQL takes the row lock an operator action holds until
// commit, so concurrent actions and the dispatcher's claims and settlements
// serialise with it.
const lockForOperatorSQL = `
SELECT state, may_have_acted, key_generation, attempt_count, ordering_key IS NOT NULL OR has_dependents
FROM outbox_intents
WHERE id = @id
FOR UPDATE`

// actionAppliedSQL tells whether an action's event is already there. A
// statement of its own, run once the row lock is held: its snapshot then
// shows the event a concurrent run of the same action committed while this
// one waited for the lock (the lock's own statement would not, under READ
// COMMITTED).
const actionAppliedSQL = `
SELECT EXISTS (SELECT 1 FROM outbox_events WHERE intent_id = @id AND action_id = @action_id)`

// resendSQL is an operator's resend of an in_doubt intent, or of a failed
// one no attempt may have acted for: back to pending under a new key
// generation (the operator checked the effect did not happen, and the old
// key would replay its saved answer), with a fresh attempt budget, queued,
// unfinished.
const resendSQL = `
UPDATE outbox_intents
SET state = 'pending', queued = true, finished_at = NULL, provider_ref = NULL,
    key_generation = key_generation + 1, provider_key = NULL, key_namespace = NULL, key_first_used_at = NULL,
    may_have_acted = false, budget_from = attempt_count, recheck_at = NULL, recheck_count = 0, updated_at = now()
WHERE id = @id`

// finishSQL settles an intent as an operator decided: cancelled, succeeded
// or failed.
const finishSQL = `
UPDATE outbox_intents
SET state = @to::text, queued = false, recheck_at = NULL, updated_at = now(), finished_at = now(),
    provider_ref = coalesce(@provider_ref::text, provider_ref)
WHERE id = @id`

const insertEventSQL = `
INSERT INTO outbox_events (intent_id, actor, from_state, to_state, reason, action_id)
VALUES (@id, @actor, @from::text, @to::text, @reason, @action_id)`

// insertRevealEventSQL records that an operator was shown an intent's
// payload: an event from the intent's state to the same state. FOR SHARE
// keeps the state from changing until the event is written, so the event
// names the state the intent was in.
const insertRevealEventSQL = `
WITH current AS (
    SELECT id, state FROM outbox_intents WHERE id = @id FOR SHARE
)
INSERT INTO outbox_events (intent_id, actor, from_state, to_state, reason)
SELECT id, @actor, state, state, @reason
FROM current
RETURNING to_state`
