package intenttype

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// The errors below are defined here, in the leaf both recording and
// running import, so that the packages that return them (intents, audit)
// and the store that decides them share one type each: the public packages
// alias them.

// ErrNotFound is returned when no intent has the given id or key.
var ErrNotFound = errors.New("intent not found")

// ErrDuplicateKey is wrapped by a *DuplicateKeyError.
var ErrDuplicateKey = errors.New("an intent with this idempotency key already exists")

// DuplicateKeyError is returned when an intent's idempotency key is already
// taken. The transaction is rolled back.
type DuplicateKeyError struct {
	Key string
}

func (e *DuplicateKeyError) Error() string {
	return fmt.Sprintf("%s: %q", ErrDuplicateKey, e.Key)
}

// Unwrap returns ErrDuplicateKey.
func (e *DuplicateKeyError) Unwrap() error { return ErrDuplicateKey }

// TransitionError is returned for an operator action the state diagram does
// not allow from the intent's current state (resending a succeeded intent,
// say), for an intent whose attempt is in flight, for a cancel of an intent
// an attempt may have reached the provider for, or, with an expected state,
// for an intent no longer in that state. Nothing is changed.
type TransitionError struct {
	// IntentID is the intent acted on.
	IntentID int64
	// From is the intent's state when the action found it.
	From State
	// Action is "resend", "cancel" or "resolve".
	Action string
	// Allowed lists the states the action is allowed from.
	Allowed []State
	// Expected is the action's expected state when that precondition
	// failed.
	Expected State
	// Seen and Now, when Seen is set, are the version the action was
	// guarded by and the intent's version when it was locked: it changed
	// since the operator saw it.
	Seen *Version
	Now  Version
	// Why explains a refusal the states alone do not (an attempt that may
	// have acted).
	Why string
}

func (e *TransitionError) Error() string {
	if e.Seen != nil {
		return fmt.Sprintf("cannot %s intent %d: it changed since it was seen (seen at version %s, now %s %s): look at it again",
			e.Action, e.IntentID, e.Seen, e.From, e.Now)
	}
	if e.Expected != "" {
		return fmt.Sprintf("cannot %s intent %d: it is %s, not %s as expected (it changed meanwhile)", e.Action, e.IntentID, e.From, e.Expected)
	}
	if e.Why != "" && slices.Contains(e.Allowed, e.From) {
		return fmt.Sprintf("cannot %s intent %d: it is %s, but %s", e.Action, e.IntentID, e.From, e.Why)
	}
	allowed := make([]string, len(e.Allowed))
	for i, s := range e.Allowed {
		allowed[i] = string(s)
	}
	msg := fmt.Sprintf("cannot %s intent %d: it is %s, and %s is allowed only from %s", e.Action, e.IntentID, e.From, e.Action, strings.Join(allowed, " or "))
	if e.Why != "" {
		msg += " (" + e.Why + ")"
	}
	return msg
}
