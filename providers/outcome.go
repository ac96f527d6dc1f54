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
// response arrived. A request proven never to have left (RequestNeverSent)
// is OutcomeRetry with DidNotAct set, for every provider. Otherwise the
// request may have reached the provider: with an idempotency key that is
// OutcomeRetry (the key makes the repeat safe), without one it is
// OutcomeAmbiguous; DidNotAct stays false in both cases.
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
// the provider. Only these count as proof:
//
//   - a *NotSentError, UnkeyedClient's proof that no connection was ever
//     obtained for the request;
//   - a dial error (a *net.OpError whose Op is "dial", also inside a
//     proxy's "proxyconnect" error): no connection was made;
//   - a *net.DNSError: the host could not be resolved;
//   - a certificate verification failure (*tls.CertificateVerificationError,
//     x509.UnknownAuthorityError, x509.HostnameError,
//     x509.CertificateInvalidError): certificates are verified during the
//     handshake, before any request is written. This assumes TLS
//     renegotiation is off, as it is unless tls.Config.Renegotiation is set.
//
// Anything else returns false, since the request may have left: a timeout,
// a reset, an EOF, a TLS alert, and a tls.RecordHeaderError, which is
// returned both by a handshake with a server that does not speak TLS and by
// a garbled record read on an established connection, after the request
// was written. (Through UnkeyedClient, a handshake failure of any kind is
// proven by its *NotSentError instead.)
func RequestNeverSent(err error) bool {
	if err == nil {
		return false
	}
	var notSent *NotSentError
	if errors.As(err, &notSent) {
		return true
	}
	if inChain(err, isDialError) {
		return true
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
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
	var invalidErr x509.CertificateInvalidError
	if errors.As(err, &invalidErr) {
		return true
	}
	var hostnameErr x509.HostnameError
	return errors.As(err, &hostnameErr)
}

// isDialError reports whether err itself is a failed dial.
func isDialError(err error) bool {
	opErr, ok := err.(*net.OpError)
	return ok && opErr.Op == "dial"
}

// inChain reports whether match holds for err or any error it wraps. Unlike
// errors.As it does not stop at the first error of a type: a proxy's
// *net.OpError{Op: "proxyconnect"} wraps the dial's *net.OpError.
func inChain(err error, match func(error) bool) bool {
	for err != nil {
		if match(err) {
			return true
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if inChain(e, match) {
					return true
				}
			}
			return false
		default:
			return false
		}
	}
	return false
}

// ContextEndedBeforeCall reports whether ctx was already done, so a call made
// with it never started. Adapters use it to classify ctx errors that happen
// before the request is written.
func ContextEndedBeforeCall(ctx context.Context) bool { return ctx.Err() != nil }
