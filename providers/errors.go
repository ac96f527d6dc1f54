package providers

import (
	"errors"
	"fmt"
)

// ErrUnknownKind is wrapped by errors about an intent kind no provider
// performs.
var ErrUnknownKind = errors.New("unknown intent kind")

// ErrReconcileUnsupported is returned by Reconcile when the provider cannot be
// asked whether it performed a request.
var ErrReconcileUnsupported = errors.New("provider cannot reconcile")

// ErrAbsenceNotProven is wrapped by Reconcile's error when nothing was
// found but the lookup cannot prove the effect did not happen (see
// Provider.Reconcile).
var ErrAbsenceNotProven = errors.New("absence not proven")

// MismatchError is Reconcile's answer when the provider holds an object that
// carries the intent's namespace and key but whose essential parameters
// differ from the intent's payload. It is never adopted as the intent's
// effect.
type MismatchError struct {
	// ProviderRef is the provider's id for the object found.
	ProviderRef string
	// Field names the parameter that differs ("amount").
	Field string
	// Want and Got are the intent's value and the object's.
	Want, Got string
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("%s carries this intent's key but its %s is %s, not %s", e.ProviderRef, e.Field, e.Got, e.Want)
}

// PayloadError says which field of an intent's payload is wrong. Validate
// returns it so that a consumer's transaction fails with an error a person can
// act on, before anything is stored.
type PayloadError struct {
	// Kind is the intent kind whose payload was checked.
	Kind string
	// Field is the JSON path of the offending field ("amount",
	// "personalizations[0].to"), or empty when the payload as a whole is wrong.
	Field string
	// Reason says what is wrong with it.
	Reason string
}

func (e *PayloadError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("invalid %s payload: %s", e.Kind, e.Reason)
	}
	return fmt.Sprintf("invalid %s payload: field %q: %s", e.Kind, e.Field, e.Reason)
}

// UnknownKindError builds the error for a kind a provider does not perform.
func UnknownKindError(kind string) error {
	return fmt.Errorf("%w %q", ErrUnknownKind, kind)
}
