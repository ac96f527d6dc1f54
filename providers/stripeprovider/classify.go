package stripeprovider

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	stripe "github.com/stripe/stripe-go/v76"

	"github.com/outboxkit/outbox/internal/scrub"
	"github.com/outboxkit/outbox/providers"
)

// classify turns a stripe-go error into an *providers.AttemptError. Stripe's
// answer is judged in three steps, each deciding only what the one before
// left open: a typed refusal (a decline, a refused key, an idempotency
// error) before the Stripe-Should-Retry hint, as DESIGN.md invariant 13
// requires, and the hint before the status alone.
func (p *Provider) classify(err error) *providers.AttemptError {
	var se *stripe.Error
	if !errors.As(err, &se) {
		return p.classifyNoAnswer(err)
	}
	var header http.Header
	if se.LastResponse != nil {
		header = se.LastResponse.Header
	}
	ae := p.attemptErrorOf(se, err)
	if classifyRefusal(ae, se) {
		return ae
	}
	if classifyShouldRetry(ae, header.Get("Stripe-Should-Retry")) {
		return ae
	}
	classifyStatus(ae, header)
	return ae
}

// classifyNoAnswer classifies a call Stripe did not answer.
func (p *Provider) classifyNoAnswer(err error) *providers.AttemptError {
	// The request never left, or it may have reached Stripe and the key
	// makes repeating it safe. Either way, retry.
	ae := providers.ClassifyTransport(err, true)
	ae.Message = p.scrub(err.Error())
	ae.Err = &scrub.Error{Msg: ae.Message, Err: err}
	return ae
}

// attemptErrorOf is the AttemptError for Stripe's answer se, its outcome
// still to be decided.
func (p *Provider) attemptErrorOf(se *stripe.Error, err error) *providers.AttemptError {
	status := se.HTTPStatusCode
	ae := &providers.AttemptError{
		HTTPStatus: status,
		Code:       string(se.Code),
		Message:    p.scrub(se.Msg),
	}
	if ae.Message == "" {
		ae.Message = http.StatusText(status)
	}
	ae.Err = &scrub.Error{Msg: fmt.Sprintf("stripe: HTTP %d %s: %s", status, se.Type, ae.Message), Err: err}
	return ae
}

// classifyRefusal decides a decline, a refused API key and an idempotency
// error, whatever Stripe-Should-Retry says, and reports whether se was one.
func classifyRefusal(ae *providers.AttemptError, se *stripe.Error) bool {
	status := se.HTTPStatusCode
	switch {
	case status == http.StatusPaymentRequired || se.Type == stripe.ErrorTypeCard:
		// A decline: Stripe refused to charge. (The declined PaymentIntent
		// is saved under the key, so a repeat replays the decline.)
		ae.Outcome = providers.OutcomeFailed
		ae.DidNotAct = true
		if se.DeclineCode != "" {
			ae.Code = string(se.DeclineCode)
			ae.Message += " (decline code: " + string(se.DeclineCode) + ")"
		}
		if se.Code == stripe.ErrorCodeAuthenticationRequired || se.DeclineCode == stripe.DeclineCodeAuthenticationRequired {
			ae.Code = string(stripe.ErrorCodeAuthenticationRequired)
			ae.Message = "the bank asks the customer to authenticate; an off-session charge cannot, ask the customer to pay in session (Stripe: " + ae.Message + ")"
		}
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		// The account, not the intent: a rolled or expired key, a
		// restricted key without this permission. Nothing was done; once
		// the credentials are fixed the same request succeeds.
		ae.Outcome = providers.OutcomeRetry
		ae.DidNotAct = true
		ae.Code = CodeProviderAuth
		ae.Message = fmt.Sprintf("Stripe refused the API key (HTTP %d): fix the Stripe credentials (Config.APIKey) or the key's permissions; the charge is retried. Stripe: %s", status, ae.Message)
	case se.Type == stripe.ErrorTypeIdempotency:
		// The key's first request may have acted: not DidNotAct, whatever
		// Stripe-Should-Retry says of this one.
		ae.Outcome = providers.OutcomeFailed
		if ae.Code == "" {
			ae.Code = string(stripe.ErrorTypeIdempotency)
		}
	default:
		return false
	}
	return true
}

// classifyShouldRetry follows a Stripe-Should-Retry hint ("true" or
// "false"), and reports whether there was one.
func classifyShouldRetry(ae *providers.AttemptError, shouldRetry string) bool {
	status := ae.HTTPStatus
	switch {
	case shouldRetry == "true":
		ae.Outcome = providers.OutcomeRetry
	case shouldRetry == "false" && status >= 500:
		// Stripe says a repeat will not help, and the request may have
		// acted: only a look-up can tell.
		ae.Outcome = providers.OutcomeAmbiguous
	case shouldRetry == "false":
		ae.Outcome = providers.OutcomeFailed
		ae.DidNotAct = status == http.StatusBadRequest || status == http.StatusNotFound || status == http.StatusTooManyRequests
	default:
		return false
	}
	return true
}

// classifyStatus decides an answer by its status alone.
func classifyStatus(ae *providers.AttemptError, header http.Header) {
	switch status := ae.HTTPStatus; {
	case status == http.StatusConflict:
		ae.Outcome = providers.OutcomeRetry
	case status == http.StatusTooManyRequests:
		ae.Outcome = providers.OutcomeRetry
		ae.RetryAfter = retryAfter(header.Get("Retry-After"), time.Now())
		ae.DidNotAct = true
	case status == http.StatusFailedDependency:
		// 424: a service Stripe depends on failed while the request was
		// executing; the charge may or may not have happened.
		ae.Outcome = providers.OutcomeAmbiguous
	case status >= 400 && status < 500:
		ae.Outcome = providers.OutcomeFailed
		// Validation 400s and 404 are refused before anything is done or
		// saved.
		ae.DidNotAct = status == http.StatusBadRequest || status == http.StatusNotFound
	case status == http.StatusInternalServerError:
		ae.Outcome = providers.OutcomeAmbiguous
	case status > 500:
		ae.Outcome = providers.OutcomeRetry
	default:
		ae.Outcome = providers.OutcomeAmbiguous
	}
}

// retryAfter parses a Retry-After header: delay-seconds or an HTTP date.
func retryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseFloat(v, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		return time.Duration(secs * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// classifyLookup turns a failed list, search or retrieve call into a
// *providers.LookupError: it proves nothing about the intent, whatever its
// status (a 404 for a PaymentIntent of another account or mode, a 400
// resource_missing, a 429 with Stripe-Should-Retry: false). Needs says
// what the look-up needs to answer.
func (p *Provider) classifyLookup(err error) *providers.LookupError {
	ae := p.classify(err)
	le := providers.AsLookupError(ae, "")
	le.Message = ae.Message
	if le.Code == CodeProviderAuth {
		le.Code = ""
		le.Message = ""
		if se := (*stripe.Error)(nil); errors.As(err, &se) {
			le.Message = p.scrub(se.Msg)
		}
	}
	switch {
	case le.HTTPStatus == http.StatusUnauthorized:
		le.Needs = "a valid Stripe secret key (Config.APIKey)"
	case le.HTTPStatus == http.StatusForbidden:
		le.Needs = "a Stripe key allowed to read PaymentIntents and refunds"
	case le.HTTPStatus == http.StatusNotFound || le.Code == string(stripe.ErrorCodeResourceMissing):
		le.Needs = "the Stripe account and mode (live or test) the intent's objects were made in"
	case le.HTTPStatus == http.StatusTooManyRequests:
		le.Needs = "fewer requests: Stripe's rate limit"
	case le.Refused():
		le.Needs = "a look-up Stripe accepts: " + le.Message
	}
	return le
}
