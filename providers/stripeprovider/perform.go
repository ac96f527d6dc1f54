package stripeprovider

import (
	"context"
	"fmt"
	"strings"

	stripe "github.com/stripe/stripe-go/v76"

	"github.com/outboxkit/outbox/providers"
)

// Perform creates the PaymentIntent described by req, with req.IdempotencyKey
// as Stripe's Idempotency-Key and the intent's identity in metadata:
// req.Namespace as "outbox_namespace" (left out when empty),
// req.IdempotencyKey as "outbox_key" and req.IntentID as "intent_id". On
// success the Result carries the PaymentIntent's id and whether Stripe
// replayed a saved response. Otherwise the error is a *providers.AttemptError:
//
//   - 200 with a confirmed PaymentIntent that is not succeeded or
//     requires_capture: not a charge (see judge below): processing is a
//     retry that may have acted, requires_action and
//     requires_payment_method are failures with DidNotAct (Code
//     authentication_required for requires_action);
//   - 402 card_error: failed, DidNotAct, Code the decline code
//     (authentication_required: the customer must pay in session);
//   - 401, 403: retry with DidNotAct and Code CodeProviderAuth: the key was
//     rolled, expired or lacks a permission, nothing was done, and the
//     queue waits for the credentials to be fixed;
//   - 400 (including idempotency_error: the key was reused with other
//     parameters), 404: failed, with Stripe's message;
//   - 409 (idempotency_key_in_use), 429 (RetryAfter from Retry-After), 502,
//     503, 504, or any answer with "Stripe-Should-Retry: true": retry;
//   - "Stripe-Should-Retry: false": not retried: ambiguous for a 5xx,
//     failed otherwise (after the 402 and 401/403 rules above);
//   - 500 and 424: ambiguous, because Stripe saved the 500 under the key
//     and would replay it to every retry (a 424 reports a failed
//     dependency mid-request), while the charge may or may not exist;
//   - no usable answer (connection refused, timeout, dropped connection,
//     undecodable body): retry, since the same key makes the repeat safe.
//
// Perform never retries by itself (stripe-go's retries are off). Note that
// Go's http.Transport may transparently resend a request once when a reused
// keep-alive connection fails before any response byte arrives, because the
// request carries an Idempotency-Key header; with the same key that resend is
// answered from Stripe's idempotency store, so it cannot charge twice, and
// the Result then reports Replayed.
//
// A payload that fails validation, an empty or over-long key, a namespace
// longer than a metadata value may be, or a provider without an API key fail
// without sending.
//
// KindRefund, KindCapture and KindCancel are performed by performRefund,
// performCapture and performCancel (money.go), with the same checks and
// the same classification.
func (p *Provider) Perform(ctx context.Context, req providers.Request) (providers.Result, error) {
	decoded, err := decodeAny(req.Kind, req.Payload)
	if err != nil {
		return providers.Result{}, refused(err)
	}
	if err := p.ready(); err != nil {
		return providers.Result{}, err
	}
	if ae := checkIdentity(req); ae != nil {
		return providers.Result{}, ae
	}
	switch d := decoded.(type) {
	case *RefundPayload:
		return p.performRefund(ctx, req, d)
	case *CapturePayload:
		return p.performCapture(ctx, req, d)
	case *CancelPayload:
		return p.performCancel(ctx, req, d)
	}
	return p.createPaymentIntent(ctx, req, decoded.(*PaymentIntentPayload))
}

// checkIdentity refuses, before sending, a request whose key or namespace
// Stripe could not carry: no key, a key over MaxKeyLength, a namespace
// over MaxMetadataValueBytes.
func checkIdentity(req providers.Request) *providers.AttemptError {
	key := strings.TrimSpace(req.IdempotencyKey)
	switch {
	case key == "":
		return &providers.AttemptError{Outcome: providers.OutcomeFailed, Message: "the intent has no idempotency key; refusing to move money without one", DidNotAct: true}
	case len(key) > MaxKeyLength:
		return &providers.AttemptError{Outcome: providers.OutcomeFailed, Message: fmt.Sprintf("the idempotency key is longer than Stripe's %d bytes", MaxKeyLength), DidNotAct: true}
	case len(req.Namespace) > MaxMetadataValueBytes:
		return &providers.AttemptError{Outcome: providers.OutcomeFailed, Message: fmt.Sprintf("the namespace is longer than the %d bytes a Stripe metadata value may have", MaxMetadataValueBytes), DidNotAct: true}
	}
	return nil
}

// createPaymentIntent is Perform for KindPaymentIntent.
func (p *Provider) createPaymentIntent(ctx context.Context, req providers.Request, pl *PaymentIntentPayload) (providers.Result, error) {
	pi, err := p.api.PaymentIntents.New(paymentIntentParams(ctx, req, pl))
	if err != nil {
		return providers.Result{}, p.classify(err)
	}
	res := resultOf(pi.ID, pi.LastResponse)
	if res.Replayed && pi.Status == stripe.PaymentIntentStatusProcessing {
		// Stripe replays the saved answer, which said processing: ask for
		// the PaymentIntent as it is now.
		now, err := p.currentPaymentIntent(ctx, pi.ID)
		if err != nil {
			return providers.Result{}, err
		}
		pi = now
	}
	if ae := p.judge(pi, pl, res.HTTPStatus); ae != nil {
		return providers.Result{}, ae
	}
	return res, nil
}

// paymentIntentParams are the parameters of the PaymentIntent pl
// describes, sent with req's key and tagged with req's identity.
func paymentIntentParams(ctx context.Context, req providers.Request, pl *PaymentIntentPayload) *stripe.PaymentIntentParams {
	params := &stripe.PaymentIntentParams{
		Amount:   pl.Amount,
		Currency: pl.Currency,
		Confirm:  pl.Confirm,
	}
	params.Context = ctx
	params.SetIdempotencyKey(req.IdempotencyKey)
	params.Customer = optionalString(pl.Customer)
	params.PaymentMethod = optionalString(pl.PaymentMethod)
	params.Description = optionalString(pl.Description)
	params.ReceiptEmail = optionalString(pl.ReceiptEmail)
	params.StatementDescriptorSuffix = optionalString(pl.StatementDescriptorSuffix)
	params.OffSession = pl.OffSession
	params.CaptureMethod = optionalString(pl.CaptureMethod)
	params.ReturnURL = optionalString(pl.ReturnURL)
	params.SetupFutureUsage = optionalString(pl.SetupFutureUsage)
	if pl.PaymentMethodTypes != nil {
		params.PaymentMethodTypes = stripe.StringSlice(pl.PaymentMethodTypes)
	}
	if apm := pl.AutomaticPaymentMethods; apm != nil {
		params.AutomaticPaymentMethods = &stripe.PaymentIntentAutomaticPaymentMethodsParams{Enabled: apm.Enabled, AllowRedirects: optionalString(apm.AllowRedirects)}
	} else if redirectFreeDefault(pl) {
		params.AutomaticPaymentMethods = &stripe.PaymentIntentAutomaticPaymentMethodsParams{Enabled: stripe.Bool(true), AllowRedirects: stripe.String(RedirectsNever)}
	}
	tagIntent(&params.Params, pl.Metadata, req, intentKeys)
	return params
}

// optionalString leaves an empty payload field out of the request.
func optionalString(v string) *string {
	if v == "" {
		return nil
	}
	return stripe.String(v)
}

// currentPaymentIntent reads PaymentIntent id, which Stripe's replayed
// answer showed processing. A failed read is an *providers.AttemptError
// with OutcomeRetry, never DidNotAct: the PaymentIntent exists and may
// settle, and the retry uses the same key.
func (p *Provider) currentPaymentIntent(ctx context.Context, id string) (*stripe.PaymentIntent, error) {
	gp := &stripe.PaymentIntentParams{}
	gp.Context = ctx
	pi, err := p.api.PaymentIntents.Get(id, gp)
	if err != nil {
		le := p.classifyLookup(err)
		return nil, &providers.AttemptError{Outcome: providers.OutcomeRetry, HTTPStatus: le.HTTPStatus, Code: le.Code, RetryAfter: le.RetryAfter,
			Message: fmt.Sprintf("PaymentIntent %s was processing; looking up its status failed: %s", id, le.Message), Err: le}
	}
	return pi, nil
}

// judge tells whether a PaymentIntent Stripe answered with shows the
// effect. A PaymentIntent that is not confirmed is the effect (it waits for
// its confirmation). A confirmed one is charged when succeeded, or
// authorised when requires_capture (capture_method manual); anything else
// is not a charge:
//
//   - processing: the payment settles later (bank debits, some wallets).
//     OutcomeRetry, may have acted: the dispatcher retries with the same
//     key, Stripe replays "processing", and Perform then fetches the
//     PaymentIntent to see how it ended.
//   - requires_action, requires_payment_method, requires_confirmation,
//     canceled: OutcomeFailed, DidNotAct. No money moved, and the same key
//     would replay the same answer; the customer must come back.
func (p *Provider) judge(pi *stripe.PaymentIntent, pl *PaymentIntentPayload, status int) *providers.AttemptError {
	if !isTrue(pl.Confirm) {
		return nil
	}
	switch pi.Status {
	case stripe.PaymentIntentStatusSucceeded, stripe.PaymentIntentStatusRequiresCapture:
		return nil
	case stripe.PaymentIntentStatusProcessing:
		return &providers.AttemptError{Outcome: providers.OutcomeRetry, HTTPStatus: status, Code: "processing",
			Message: fmt.Sprintf("PaymentIntent %s is processing: Stripe settles it later; the charge is retried with the same key to read its final status", pi.ID)}
	case stripe.PaymentIntentStatusRequiresAction:
		ae := &providers.AttemptError{Outcome: providers.OutcomeFailed, HTTPStatus: status, Code: "authentication_required", DidNotAct: true}
		if isTrue(pl.OffSession) {
			ae.Message = fmt.Sprintf("PaymentIntent %s requires_action: the bank asks the customer to authenticate; an off-session charge cannot, ask the customer to pay in session", pi.ID)
		} else {
			ae.Message = fmt.Sprintf("PaymentIntent %s requires_action: the customer must authenticate the payment, which a background charge cannot do; ask the customer to pay in session", pi.ID)
		}
		return ae
	}
	ae := &providers.AttemptError{Outcome: providers.OutcomeFailed, HTTPStatus: status, DidNotAct: true, Code: string(pi.Status),
		Message: fmt.Sprintf("PaymentIntent %s is %s: nothing was charged", pi.ID, pi.Status)}
	if le := pi.LastPaymentError; le != nil {
		if le.Code != "" {
			ae.Code = string(le.Code)
		}
		if le.DeclineCode != "" {
			ae.Code = string(le.DeclineCode)
		}
		if le.Msg != "" {
			ae.Message += ": " + p.scrub(le.Msg)
		}
	}
	if pi.Status == stripe.PaymentIntentStatusRequiresPaymentMethod {
		ae.Message += "; ask the customer for another payment method"
	}
	return ae
}
