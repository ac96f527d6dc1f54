package audit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/intents/intenttype"
)

// ActionKind names an operator action.
type ActionKind string

// The operator actions DESIGN.md's diagram allows.
const (
	// ActionResend moves an in_doubt intent back to pending and enqueues its
	// dispatch job.
	ActionResend ActionKind = "resend"
	// ActionCancel moves a pending or in_doubt intent to cancelled.
	ActionCancel ActionKind = "cancel"
	// ActionResolve settles an in_doubt intent as succeeded or failed.
	ActionResolve ActionKind = "resolve"
)

// AllowedFrom returns the states an action is allowed from, in diagram
// order; nil for an unknown action.
func (k ActionKind) AllowedFrom() []intenttype.State {
	switch k {
	case ActionResend, ActionResolve:
		return []intenttype.State{intenttype.StateInDoubt}
	case ActionCancel:
		return []intenttype.State{intenttype.StatePending, intenttype.StateInDoubt}
	}
	return nil
}

// Action is one operator action, for Act. Resend, Cancel and Resolve are
// shorthands for it without IfState.
type Action struct {
	// Kind is the action. Required.
	Kind ActionKind
	// IntentID is the intent acted on. Required.
	IntentID int64
	// As is the state Resolve settles the intent in: succeeded or failed.
	// Only for ActionResolve, where it is required.
	As intenttype.State
	// Actor is who acts, recorded in the event as "operator:<Actor>" (an
	// Actor already starting with "operator:" is recorded as given).
	// Required: 1 to MaxActorLength printable bytes.
	Actor string
	// Reason is why, recorded in the event. At most MaxReasonLength
	// printable bytes; required for ActionResolve.
	Reason string
	// IfState, when set, makes the action conditional on the intent still
	// being in that state when its row is locked: what the operator saw.
	// Two operators acting at once on what they both saw (one resends an
	// in_doubt intent, one cancels it) then cannot both succeed; the second
	// gets a *TransitionError with Expected set. Without it, a cancel that
	// arrives just after a resend cancels the now pending intent.
	IfState intenttype.State
}

// Resend moves an in_doubt intent back to pending and enqueues its dispatch
// job, in one transaction: the job is not worked before the commit and
// disappears if it rolls back. The dispatcher then makes one more attempt
// even past the provider's key window: the operator has checked that the
// effect did not happen. (A provider with a key still sees the intent's
// key; within the key window, Stripe answers a repeat with its saved
// response.) actor and reason are recorded in the event; reason may be
// empty. From any other state: a *TransitionError, nothing changed.
func (s *Store) Resend(ctx context.Context, id int64, actor, reason string) (intenttype.Intent, error) {
	return s.Act(ctx, Action{Kind: ActionResend, IntentID: id, Actor: actor, Reason: reason})
}

// Cancel moves a pending or in_doubt intent to cancelled, for good. A
// dispatcher attempt already in flight still records its attempt, but
// leaves the state to the operator. From any other state: a
// *TransitionError, nothing changed.
func (s *Store) Cancel(ctx context.Context, id int64, actor, reason string) (intenttype.Intent, error) {
	return s.Act(ctx, Action{Kind: ActionCancel, IntentID: id, Actor: actor, Reason: reason})
}

// Resolve settles an in_doubt intent as succeeded or failed (as), after an
// operator found out what happened at the provider; reason is required.
// From any other state: a *TransitionError, nothing changed.
func (s *Store) Resolve(ctx context.Context, id int64, as intenttype.State, actor, reason string) (intenttype.Intent, error) {
	return s.Act(ctx, Action{Kind: ActionResolve, IntentID: id, As: as, Actor: actor, Reason: reason})
}

// Act carries out an operator action in one transaction: it locks the
// intent's row (SELECT ... FOR UPDATE), checks the transition against
// DESIGN.md's diagram (and a.IfState), updates the intent, appends an
// event with the actor and reason, and for a resend enqueues the dispatch
// job. It returns the intent as it now is, payload redacted.
//
// Errors: bad arguments, a *FieldError wrapping ErrInvalidInput; no such
// intent, ErrNotFound; a transition not allowed, a *TransitionError. In
// every error case nothing is changed.
func (s *Store) Act(ctx context.Context, a Action) (intenttype.Intent, error) {
	actor, err := a.validate()
	if err != nil {
		return intenttype.Intent{}, err
	}
	if a.Kind == ActionResend && s.jobsErr != nil {
		return intenttype.Intent{}, fmt.Errorf("audit: river client: %w", s.jobsErr)
	}
	var out intenttype.Intent
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, lockIntentSQL, a.IntentID)
		if err != nil {
			return err
		}
		current, err := pgx.CollectExactlyOneRow(rows, scanIntent)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: no intent has id %d", ErrNotFound, a.IntentID)
		}
		if err != nil {
			return err
		}
		allowed := a.Kind.AllowedFrom()
		if a.IfState != "" && current.State != a.IfState {
			return &TransitionError{IntentID: a.IntentID, From: current.State, Action: string(a.Kind), Allowed: allowed, Expected: a.IfState}
		}
		if !slices.Contains(allowed, current.State) {
			return &TransitionError{IntentID: a.IntentID, From: current.State, Action: string(a.Kind), Allowed: allowed}
		}
		var to intenttype.State
		switch a.Kind {
		case ActionResend:
			to = intenttype.StatePending
			rows, err = tx.Query(ctx, resendSQL, a.IntentID)
		case ActionResolve:
			to = a.As
			rows, err = tx.Query(ctx, finishSQL, a.IntentID, to)
		default:
			to = intenttype.StateCancelled
			rows, err = tx.Query(ctx, finishSQL, a.IntentID, to)
		}
		if err != nil {
			return err
		}
		if out, err = pgx.CollectExactlyOneRow(rows, scanIntent); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, insertEventSQL, a.IntentID, actor, current.State, to, a.Reason); err != nil {
			return err
		}
		if a.Kind == ActionResend {
			// Unique among live jobs: if one is somehow still live, it
			// does the work and no second one is made.
			if _, err := s.jobs.InsertTx(ctx, tx, intenttype.DispatchArgs{IntentID: a.IntentID}, nil); err != nil {
				return fmt.Errorf("enqueue dispatch job: %w", err)
			}
		}
		return nil
	})
	var te *TransitionError
	if errors.As(err, &te) || errors.Is(err, ErrNotFound) {
		return intenttype.Intent{}, err
	}
	if err != nil {
		return intenttype.Intent{}, fmt.Errorf("audit: %s intent %d: %w", a.Kind, a.IntentID, err)
	}
	s.redact(&out)
	return out, nil
}

// Validate reports the first problem with a's arguments as Act would (a
// *FieldError wrapping ErrInvalidInput), without touching the database, so
// a command can refuse bad input before connecting.
func (a Action) Validate() error {
	_, err := a.validate()
	return err
}

// validate checks a's arguments and returns the actor as recorded.
func (a Action) validate() (string, error) {
	if a.Kind.AllowedFrom() == nil {
		return "", inputError("kind", "unknown action %q (want resend, cancel or resolve)", truncate(string(a.Kind), 40))
	}
	if a.IntentID <= 0 {
		return "", inputError("id", "intent id must be positive, got %d", a.IntentID)
	}
	if a.Kind == ActionResolve {
		if a.As != intenttype.StateSucceeded && a.As != intenttype.StateFailed {
			return "", inputError("as", "resolve settles an intent as succeeded or failed, got %q", truncate(string(a.As), 40))
		}
		if strings.TrimSpace(a.Reason) == "" {
			return "", inputError("reason", "resolve needs a reason: what was found at the provider")
		}
	} else if a.As != "" {
		return "", inputError("as", "only resolve takes a target state")
	}
	if a.IfState != "" && !a.IfState.Valid() {
		return "", inputError("if_state", "unknown state %q (known: %s)", truncate(string(a.IfState), 40), stateNames())
	}
	actor := strings.TrimPrefix(a.Actor, ActorPrefix)
	switch {
	case strings.TrimSpace(actor) == "":
		return "", inputError("actor", "say who acts (e.g. a user name)")
	case len(actor) > MaxActorLength:
		return "", inputError("actor", "longer than %d bytes", MaxActorLength)
	case !printable(actor):
		return "", inputError("actor", "contains control characters or invalid UTF-8")
	}
	switch {
	case len(a.Reason) > MaxReasonLength:
		return "", inputError("reason", "longer than %d bytes (%d)", MaxReasonLength, len(a.Reason))
	case !printable(a.Reason):
		return "", inputError("reason", "contains control characters or invalid UTF-8")
	}
	return ActorPrefix + actor, nil
}
