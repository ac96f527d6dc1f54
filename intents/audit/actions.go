package audit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"unicode"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/internal/intentstore"
)

// ActionKind names an operator action; see intenttype.ActionKind.
type ActionKind = intenttype.ActionKind

// The operator actions the state diagram allows.
const (
	// ActionResend moves an in_doubt intent, or a failed one no attempt may
	// have acted for, back to pending under a new key generation, with a
	// fresh attempt budget, queued for the dispatchers.
	ActionResend = intenttype.ActionResend
	// ActionCancel moves a pending intent that no attempt may have reached
	// the provider for to cancelled.
	ActionCancel = intenttype.ActionCancel
	// ActionResolve settles an in_doubt intent as succeeded or failed.
	ActionResolve = intenttype.ActionResolve
)

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
	// ProviderRef, only when resolving as succeeded and optional, is the
	// provider's reference for the effect the operator found (a Stripe
	// PaymentIntent id, a SendGrid X-Message-Id): it is set on the intent,
	// and the intents that come after it and fill a field from it
	// (intents.Intent.After with Fill) are released with that field
	// filled. Without it such intents are cancelled, saying why. It is
	// named in the event's reason. 1 to MaxProviderRefLength printable
	// bytes, no spaces.
	ProviderRef string
	// IfVersion, when set, makes the action conditional on the intent
	// still being at that version when its row is locked: what the
	// operator saw (intenttype.Intent.Version). Stronger than IfState: an
	// intent that went in_doubt, was resent, was charged and went in_doubt
	// again is in the state the operator saw, but not at the version, and
	// a resend from that stale view would charge twice. Refused: a
	// *TransitionError with Seen set. Every door (the CLI's --if-version,
	// the API's if_version, the dashboard's forms) passes what it showed.
	IfVersion *intenttype.Version
	// ActionID identifies the action (DESIGN.md, invariant 11): it is
	// recorded with the event, and an action whose id an intent's events
	// already hold is not applied again; Act returns the intent as it is.
	// A caller that retries after a lost answer (a client whose request
	// timed out) sends the same ActionID. At most MaxActionIDLength
	// printable bytes. Empty: Act makes one for this call, so its own
	// retries after a lost commit acknowledgement are safe.
	ActionID string
}

// MaxActionIDLength bounds Action.ActionID.
const MaxActionIDLength = 128

// newActionID returns a random action id.
func newActionID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "act_" + hex.EncodeToString(b[:])
}

// Resend moves an in_doubt intent back to pending under a new key
// generation, with a fresh attempt budget, queued for the dispatchers, in
// one transaction: it is not claimed before the commit, and stays as it was
// if it rolls back. The dispatcher then performs it once more:
// the operator has checked (HowToCheck) that the effect did not happen.
// actor and reason are recorded in the event; reason may be empty. From
// any other state: a *TransitionError, nothing changed.
func (s *Store) Resend(ctx context.Context, id int64, actor, reason string) (intenttype.Intent, error) {
	return s.Act(ctx, Action{Kind: ActionResend, IntentID: id, Actor: actor, Reason: reason})
}

// Cancel moves a pending or waiting intent to cancelled, for good, while no
// attempt may have reached the provider for it; the intents waiting for it
// are cancelled with it, in the same transaction. From any other state, with an
// attempt in flight, or once an attempt may have acted: a
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
	if a.ActionID == "" {
		a.ActionID = newActionID()
	}
	err = s.store.Act(ctx, intentstore.OperatorAction{
		Kind: a.Kind, IntentID: a.IntentID, To: a.As, Actor: actor, Reason: a.Reason, IfState: a.IfState, ProviderRef: a.ProviderRef,
		IfVersion: a.IfVersion, ActionID: a.ActionID,
	})
	var te *TransitionError
	if errors.As(err, &te) {
		return intenttype.Intent{}, err
	}
	if errors.Is(err, ErrNotFound) {
		return intenttype.Intent{}, err
	}
	if err != nil {
		return intenttype.Intent{}, fmt.Errorf("audit: %s intent %d: %w", a.Kind, a.IntentID, err)
	}
	rows, err := s.pool.Query(ctx, intentByIDSQL, a.IntentID)
	if err != nil {
		return intenttype.Intent{}, fmt.Errorf("audit: %s intent %d: %w", a.Kind, a.IntentID, err)
	}
	out, err := pgx.CollectExactlyOneRow(rows, scanIntent)
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
	if a.ProviderRef != "" {
		switch {
		case a.Kind != ActionResolve || a.As != intenttype.StateSucceeded:
			return "", inputError("provider_ref", "only a resolve as succeeded takes a provider reference: the effect the provider performed")
		case len(a.ProviderRef) > MaxProviderRefLength:
			return "", inputError("provider_ref", "longer than %d bytes (%d)", MaxProviderRefLength, len(a.ProviderRef))
		case !printable(a.ProviderRef) || strings.ContainsFunc(a.ProviderRef, unicode.IsSpace):
			return "", inputError("provider_ref", "contains spaces, control characters or invalid UTF-8")
		}
	}
	if len(a.ActionID) > MaxActionIDLength || !printable(a.ActionID) || strings.ContainsFunc(a.ActionID, unicode.IsSpace) {
		return "", inputError("action_id", "at most %d printable bytes without spaces", MaxActionIDLength)
	}
	if v := a.IfVersion; v != nil && (v.KeyGeneration < 0 || v.AttemptCount < 0) {
		return "", inputError("if_version", "version %s has a negative part", v)
	}
	if a.IfState != "" && !a.IfState.Valid() {
		return "", inputError("if_state", "unknown state %q (known: %s)", truncate(string(a.IfState), 40), stateNames())
	}
	return validateActorReason(a.Actor, a.Reason, false)
}
