package providers

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"time"
)

// Outcome classifies one attempt.
type Outcome string

const (
	// OutcomeSucceeded: the provider performed the effect.
	OutcomeSucceeded Outcome = "succeeded"
	// OutcomeRetry: try again later. Either the provider did not act (the
	// request never left, a 429) or the idempotency key makes a repeat safe.
	OutcomeRetry Outcome = "retry"
	// OutcomeFailed: the provider refused for good (validation, auth,
	// decline). Repeating would give the same answer.
	OutcomeFailed Outcome = "failed"
	// OutcomeAmbiguous: the provider may have acted, and repeating could act
	// twice. The dispatcher reconciles or holds the intent in_doubt.
	OutcomeAmbiguous Outcome = "ambiguous"
)

// AttemptError is the classified failure of one attempt. Adapters return it
// (possibly wrapped) from Perform.
type AttemptError struct {
	// Outcome is OutcomeRetry, OutcomeFailed or OutcomeAmbiguous.
	Outcome Outcome
	// HTTPStatus is the response's status, or 0 when there was no response.
	HTTPStatus int
	// RetryAfter is how long the provider asked us to wait (429's
	// Retry-After or rate-limit reset), or 0.
	RetryAfter time.Duration
	// Code is the provider's machine-readable error code, such as Stripe's
	// decline code. It may be empty.
	Code string
	// Message is the provider's human-readable explanation. It is stored in
	// the audit trail, so adapters must not put secrets in it.
	Message string
	// Err is the underlying error, if any.
	Err error
	// DidNotAct is true only when the provider certainly did not act on
	// this request: it never left (dial, DNS, TLS handshake, a context that
	// ended before the call), or the provider refused it before acting and
	// saved nothing (429, a validation 400, 401, 403). The zero value, the
	// safe one, means the provider may have acted: a timeout, a lost
	// connection, a 5xx, a 409 key-in-use. The dispatcher keeps "may have
	// acted" for the rest of the intent's life (DESIGN.md, invariant 3).
	DidNotAct bool
}

// MayHaveActed reports whether the provider may have acted on the request
// this error ended: anything but a proven DidNotAct. Classify(err) first for
// a plain error.
func (e *AttemptError) MayHaveActed() bool { return !e.DidNotAct }

func (e *AttemptError) Error() string {
	msg := string(e.Outcome)
	if e.HTTPStatus != 0 {
		msg += fmt.Sprintf(" (HTTP %d)", e.HTTPStatus)
	}
	if e.Code != "" {
		msg += " " + e.Code
	}
	if e.Message != "" {
		msg += ": " + e.Message
	} else if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *AttemptError) Unwrap() error { return e.Err }

// Classify returns the AttemptError in err's chain. An error that carries no
// classification is ambiguous: the dispatcher cannot know whether the
// provider acted. Classify(nil) is nil.
func Classify(err error) *AttemptError {
	if err == nil {
		return nil
	}
	var attemptErr *AttemptError
	if errors.As(err, &attemptErr) {
		return attemptErr
	}
	return &AttemptError{Outcome: OutcomeAmbiguous, Err: err}
}

// ClassifyTransport classifies an error that ended an HTTP call before any
// response arrived. A request that never left (dial, DNS or TLS failure, or a
// context that ended before the call) is OutcomeRetry for every provider.
// Otherwise the request may have reached the provider: with an idempotency
// key that is OutcomeRetry (the key makes the repeat safe), without one it is
// OutcomeAmbiguous.
func ClassifyTransport(err error, keyed bool) *AttemptError {
	if RequestNeverSent(err) {
		return &AttemptError{Outcome: OutcomeRetry, Err: err, DidNotAct: true}
	}
	if keyed {
		return &AttemptError{Outcome: OutcomeRetry, Err: err}
	}
	return &AttemptError{Outcome: OutcomeAmbiguous, Err: err}
}

// RequestNeverSent reports whether err proves that a request never reached
// the provider: the connection could not be made, the host could not be
// resolved, or the TLS handshake failed. Timeouts and resets after the
// connection was made prove nothing and return false.
func RequestNeverSent(err error) bool {
	if err == nil {
		return false
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		return true
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return true
	}
	var recordErr tls.RecordHeaderError
	if errors.As(err, &recordErr) {
		return true
	}
	var certErr *tls.CertificateVerificationError
	if errors.As(err, &certErr) {
		return true
	}
	var unknownAuth x509.UnknownAuthorityError
	if errors.As(err, &unknownAuth) {
		return true
	}
	var hostnameErr x509.HostnameError
	return errors.As(err, &hostnameErr)
}

// ContextEndedBeforeCall reports whether ctx was already done, so a call made
// with it never started. Adapters use it to classify ctx errors that happen
// before the request is written.
func ContextEndedBeforeCall(ctx context.Context) bool { return ctx.Err() != nil }
