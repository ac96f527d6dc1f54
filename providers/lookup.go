package providers

import (
	"errors"
	"fmt"
	"net/http"
	"time"
)

// A look-up (Provider.Reconcile) proves presence, or absence through a
// consistent read, and nothing else (DESIGN.md, invariant 12). Of its
// errors, only a *NotPerformedError moves an intent out of in_doubt: it is
// the provider's own object, found by the intent's identity, showing that
// nothing was done. Every other error, a *LookupError above all, leaves
// the intent where it was. An adapter must never return an *AttemptError
// classified from a look-up's HTTP answer: a 400 or 404 to a list request
// says nothing about the request the list was meant to find.

// NotPerformedError is Reconcile's proof that the effect did not happen and
// cannot now: the provider holds this intent's own object (its namespace
// and key) and its state shows nothing was done, such as a declined
// PaymentIntent or a failed refund. The dispatcher settles the intent
// failed with Message.
type NotPerformedError struct {
	// ProviderRef is the provider's id of the object that shows it.
	ProviderRef string
	// Code is the provider's reason ("card_declined", "canceled"), or empty.
	Code string
	// Message says what the object shows. It is stored in the audit trail.
	Message string
}

func (e *NotPerformedError) Error() string {
	if e.Code != "" {
		return e.Code + ": " + e.Message
	}
	return e.Message
}

// LookupError is Reconcile's answer when the look-up itself did not answer
// the question: the provider refused it (400, 401, 403, 404: no add-on, a
// key without the scope, another account or mode), rate limited it (429),
// failed (5xx), or could not be reached. It proves nothing about the
// intent, which stays in_doubt.
type LookupError struct {
	// HTTPStatus is the look-up's status, or 0 when there was no response.
	HTTPStatus int
	// Code is the provider's machine-readable error code, or empty.
	Code string
	// Message is the provider's explanation, free of secrets.
	Message string
	// Needs says, for an operator, what the look-up needs to answer (the
	// Email Activity add-on, a key with the email_activity.read scope, the
	// Stripe account and mode the object was made in), or is empty for a
	// passing failure.
	Needs string
	// RetryAfter is how long the provider asked to wait before asking
	// again (a 429's Retry-After or rate-limit reset), or 0. A look-up
	// rate limited this way is asked again then, without spending one of
	// the intent's re-checks.
	RetryAfter time.Duration
	// Err is the underlying error, if any.
	Err error
}

func (e *LookupError) Error() string {
	msg := "look-up failed"
	if e.Refused() {
		msg = "look-up refused"
	}
	if e.HTTPStatus != 0 {
		msg += fmt.Sprintf(" (HTTP %d)", e.HTTPStatus)
	}
	if e.Code != "" {
		msg += " " + e.Code
	}
	switch {
	case e.Message != "":
		msg += ": " + e.Message
	case e.Err != nil:
		msg += ": " + e.Err.Error()
	}
	if e.Needs != "" {
		msg += "; it needs " + e.Needs
	}
	return msg
}

func (e *LookupError) Unwrap() error { return e.Err }

// Refused reports whether the provider refused the look-up for good (a
// 4xx other than 408, 409 and 429): asking again as it is gets the same
// answer until an operator changes what Needs names.
func (e *LookupError) Refused() bool {
	switch e.HTTPStatus {
	case http.StatusRequestTimeout, http.StatusConflict, http.StatusTooManyRequests:
		return false
	}
	return e.HTTPStatus >= 400 && e.HTTPStatus < 500
}

// AsLookupError returns err as a *LookupError: err itself when it is one,
// or one built from the *AttemptError an adapter's shared classification
// gave a look-up's answer, or one wrapping any other error. needs is kept
// where the error has none.
func AsLookupError(err error, needs string) *LookupError {
	var le *LookupError
	if errors.As(err, &le) {
		if le.Needs == "" {
			le.Needs = needs
		}
		return le
	}
	var ae *AttemptError
	if errors.As(err, &ae) {
		return &LookupError{HTTPStatus: ae.HTTPStatus, Code: ae.Code, Message: ae.Message, Needs: needs, RetryAfter: ae.RetryAfter, Err: ae.Err}
	}
	return &LookupError{Needs: needs, Err: err}
}
