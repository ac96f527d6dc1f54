package stripeprovider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"

	stripe "github.com/stripe/stripe-go/v76"

	"github.com/outboxkit/outbox/providers"
)

// The kinds that move money after a charge: refunds, captures and
// cancels of an existing PaymentIntent.
const (
	// KindRefund refunds a succeeded PaymentIntent (POST /v1/refunds), in
	// full or in part. Its payload is described by RefundPayload.
	KindRefund = "stripe.refund"
	// KindCapture captures an authorised PaymentIntent (capture_method
	// manual, status requires_capture) with
	// POST /v1/payment_intents/{id}/capture. Its payload is described by
	// CapturePayload.
	KindCapture = "stripe.payment_intent_capture"
	// KindCancel cancels a PaymentIntent that has not succeeded (an
	// authorisation, say) with POST /v1/payment_intents/{id}/cancel. Its
	// payload is described by CancelPayload.
	KindCancel = "stripe.payment_intent_cancel"
)

// A capture's metadata is merged into its PaymentIntent's, so a capture
// carries its intent's identity under keys of its own: under the
// PaymentIntent's keys (NamespaceMetadataKey, KeyMetadataKey,
// IntentIDMetadataKey) it would overwrite the identity of the intent that
// created the PaymentIntent, and reconciling that intent would then miss
// its own charge. Capture payloads may not use these keys either.
const (
	CaptureNamespaceMetadataKey = "outbox_capture_namespace"
	CaptureKeyMetadataKey       = "outbox_capture_key"
	CaptureIntentIDMetadataKey  = "outbox_capture_intent_id"
)

// captureReserved lists the metadata keys capture payloads may not use:
// the PaymentIntent's identity and the capture's.
var captureReserved = []string{NamespaceMetadataKey, KeyMetadataKey, IntentIDMetadataKey,
	CaptureNamespaceMetadataKey, CaptureKeyMetadataKey, CaptureIntentIDMetadataKey}

// Values of the reason fields.
const (
	ReasonDuplicate           = "duplicate"
	ReasonFraudulent          = "fraudulent"
	ReasonRequestedByCustomer = "requested_by_customer"
	ReasonAbandoned           = "abandoned"
)

var (
	refundReasons       = []string{ReasonDuplicate, ReasonFraudulent, ReasonRequestedByCustomer}
	cancellationReasons = []string{ReasonDuplicate, ReasonFraudulent, ReasonRequestedByCustomer, ReasonAbandoned}
	paymentIntentIDRE   = regexp.MustCompile(`^pi_[A-Za-z0-9]+$`)
)

// RefundPayload is the JSON payload of a KindRefund intent. Unknown fields
// are refused. Amount is a pointer, as PaymentIntentPayload's is:
// RefundPayload{Amount: new(int64(1500))}.
type RefundPayload struct {
	// PaymentIntent is the id ("pi_...") of the succeeded PaymentIntent to
	// refund. Required.
	PaymentIntent string `json:"payment_intent"`
	// Amount to refund, in the currency's smallest unit, 1..MaxAmount.
	// Optional: without it Stripe refunds whatever is left. Stripe refuses
	// more than is left (the amount received less earlier refunds).
	Amount *int64 `json:"amount,omitempty"`
	// Reason is "duplicate", "fraudulent" or "requested_by_customer".
	// Optional.
	Reason string `json:"reason,omitempty"`
	// Metadata is copied to the refund, as a PaymentIntentPayload's is.
	Metadata map[string]string `json:"metadata,omitempty"`
}

// CapturePayload is the JSON payload of a KindCapture intent. Unknown
// fields are refused.
type CapturePayload struct {
	// PaymentIntent is the id ("pi_...") of the authorised PaymentIntent.
	// Required.
	PaymentIntent string `json:"payment_intent"`
	// AmountToCapture, 1..MaxAmount, at most what was authorised. Optional:
	// without it Stripe captures all of it.
	AmountToCapture *int64 `json:"amount_to_capture,omitempty"`
	// Metadata is merged into the PaymentIntent's (see
	// CaptureKeyMetadataKey for the keys it may not use).
	Metadata map[string]string `json:"metadata,omitempty"`
}

// CancelPayload is the JSON payload of a KindCancel intent. Unknown fields
// are refused. Stripe's cancel takes no metadata.
type CancelPayload struct {
	// PaymentIntent is the id ("pi_...") of the PaymentIntent. Required.
	PaymentIntent string `json:"payment_intent"`
	// CancellationReason is "duplicate", "fraudulent",
	// "requested_by_customer" or "abandoned". Optional.
	CancellationReason string `json:"cancellation_reason,omitempty"`
}

func badField(kind, field, reason string) error {
	return &providers.PayloadError{Kind: kind, Field: field, Reason: reason}
}

func checkPaymentIntentID(kind, id string) error {
	switch {
	case id == "":
		return badField(kind, "payment_intent", "is required")
	case !paymentIntentIDRE.MatchString(id) || len(id) > 255:
		return badField(kind, "payment_intent", "must be a Stripe PaymentIntent id (pi_...)")
	}
	return nil
}

func checkOptionalAmount(kind, field string, amount *int64) error {
	switch {
	case amount == nil:
		return nil
	case *amount <= 0:
		return badField(kind, field, "must be a positive integer (in the currency's smallest unit)")
	case *amount > MaxAmount:
		return badField(kind, field, fmt.Sprintf("must be at most %d", MaxAmount))
	}
	return nil
}

func checkEnum(kind, field, v string, allowed []string) error {
	if v == "" || slices.Contains(allowed, v) {
		return nil
	}
	return badField(kind, field, `must be one of "`+strings.Join(allowed, `", "`)+`"`)
}

func decodeRefund(payload json.RawMessage) (*RefundPayload, error) {
	var pl RefundPayload
	if err := providers.DecodePayload(KindRefund, payload, &pl); err != nil {
		return nil, err
	}
	if err := checkPaymentIntentID(KindRefund, pl.PaymentIntent); err != nil {
		return nil, err
	}
	if err := checkOptionalAmount(KindRefund, "amount", pl.Amount); err != nil {
		return nil, err
	}
	if err := checkEnum(KindRefund, "reason", pl.Reason, refundReasons); err != nil {
		return nil, err
	}
	if err := checkMetadata(KindRefund, pl.Metadata, reservedMetadata); err != nil {
		return nil, err
	}
	return &pl, nil
}

func decodeCapture(payload json.RawMessage) (*CapturePayload, error) {
	var pl CapturePayload
	if err := providers.DecodePayload(KindCapture, payload, &pl); err != nil {
		return nil, err
	}
	if err := checkPaymentIntentID(KindCapture, pl.PaymentIntent); err != nil {
		return nil, err
	}
	if err := checkOptionalAmount(KindCapture, "amount_to_capture", pl.AmountToCapture); err != nil {
		return nil, err
	}
	if err := checkMetadata(KindCapture, pl.Metadata, captureReserved); err != nil {
		return nil, err
	}
	return &pl, nil
}

func decodeCancel(payload json.RawMessage) (*CancelPayload, error) {
	var pl CancelPayload
	if err := providers.DecodePayload(KindCancel, payload, &pl); err != nil {
		return nil, err
	}
	if err := checkPaymentIntentID(KindCancel, pl.PaymentIntent); err != nil {
		return nil, err
	}
	if err := checkEnum(KindCancel, "cancellation_reason", pl.CancellationReason, cancellationReasons); err != nil {
		return nil, err
	}
	return &pl, nil
}

// decodeAny decodes a payload of any of the provider's kinds.
func decodeAny(kind string, payload json.RawMessage) (any, error) {
	switch kind {
	case KindRefund:
		return decodeRefund(payload)
	case KindCapture:
		return decodeCapture(payload)
	case KindCancel:
		return decodeCancel(payload)
	}
	return decode(kind, payload)
}

func refused(err error) *providers.AttemptError {
	return &providers.AttemptError{Outcome: providers.OutcomeFailed, Message: err.Error(), Err: err, DidNotAct: true}
}

// identityKeys are the metadata keys an intent's identity is written
// under: the namespace (only when there is one), the idempotency key and
// the intent id.
type identityKeys struct{ namespace, key, intentID string }

var (
	// intentKeys tag the object an intent creates (a PaymentIntent, a
	// refund), which Reconcile finds by them.
	intentKeys = identityKeys{NamespaceMetadataKey, KeyMetadataKey, IntentIDMetadataKey}
	// captureKeys tag a captured PaymentIntent, whose own intentKeys
	// belong to the intent that created it.
	captureKeys = identityKeys{CaptureNamespaceMetadataKey, CaptureKeyMetadataKey, CaptureIntentIDMetadataKey}
)

// tagIntent puts the payload's metadata and req's identity under keys on
// params, so that Reconcile can find what the call made (decoding refuses
// payload metadata under the reserved keys).
func tagIntent(params *stripe.Params, metadata map[string]string, req providers.Request, keys identityKeys) {
	for k, v := range metadata {
		params.AddMetadata(k, v)
	}
	if req.Namespace != "" {
		params.AddMetadata(keys.namespace, req.Namespace)
	}
	params.AddMetadata(keys.key, req.IdempotencyKey)
	params.AddMetadata(keys.intentID, strconv.FormatInt(req.IntentID, 10))
}

// resultOf is the Result of a call that answered with object id: its
// status, and whether Stripe replayed a saved answer for the key.
func resultOf(id string, lr *stripe.APIResponse) providers.Result {
	res := providers.Result{ProviderRef: id}
	if lr != nil {
		res.HTTPStatus = lr.StatusCode
		res.Replayed = lr.Header.Get("Idempotent-Replayed") == "true"
	}
	return res
}

// ---- refunds ----

// performRefund creates the refund, with the key as Idempotency-Key and
// the intent's identity in the refund's metadata, as Perform does for a
// PaymentIntent. A refund Stripe answers as failed or canceled moved no
// money: OutcomeFailed, DidNotAct.
func (p *Provider) performRefund(ctx context.Context, req providers.Request, pl *RefundPayload) (providers.Result, error) {
	params := &stripe.RefundParams{PaymentIntent: stripe.String(pl.PaymentIntent), Amount: pl.Amount}
	if pl.Reason != "" {
		params.Reason = stripe.String(pl.Reason)
	}
	params.Context = ctx
	params.SetIdempotencyKey(req.IdempotencyKey)
	tagIntent(&params.Params, pl.Metadata, req, intentKeys)
	rf, err := p.api.Refunds.New(params)
	if err != nil {
		return providers.Result{}, p.classify(err)
	}
	res := resultOf(rf.ID, rf.LastResponse)
	if rf.Status == stripe.RefundStatusFailed || rf.Status == stripe.RefundStatusCanceled {
		return providers.Result{}, &providers.AttemptError{Outcome: providers.OutcomeFailed, HTTPStatus: res.HTTPStatus, DidNotAct: true,
			Code: string(rf.FailureReason), Message: fmt.Sprintf("refund %s of %s is %s: nothing was refunded", rf.ID, pl.PaymentIntent, rf.Status)}
	}
	return res, nil
}

// reconcileRefund lists the refunds of the payload's PaymentIntent
// (GET /v1/refunds?payment_intent=..., strongly consistent), created no
// earlier than KeyFirstUsedAt less ListClockSkewMargin, at most
// Config.ReconcileMaxPages pages, and keeps those carrying req's namespace
// and key. One whose amount differs from the payload's is a
// *providers.MismatchError; one pending or succeeded is found; one that
// failed or was canceled is a *providers.NotPerformedError; none in the whole listing is a proven absence, unless the
// intent has no namespace or the page bound cut the listing short
// (providers.ErrAbsenceNotProven).
func (p *Provider) reconcileRefund(ctx context.Context, req providers.Request, pl *RefundPayload) (providers.Result, bool, error) {
	params := &stripe.RefundListParams{PaymentIntent: stripe.String(pl.PaymentIntent)}
	params.Context = ctx
	params.Single = true
	params.Limit = stripe.Int64(p.pageSize)
	if !req.KeyFirstUsedAt.IsZero() {
		params.CreatedRange = &stripe.RangeQueryParams{GreaterThanOrEqual: req.KeyFirstUsedAt.Add(-ListClockSkewMargin).Unix()}
	}
	var found, inert *stripe.Refund
	status, complete, err := scanOwned(p, req, ownedList[*stripe.Refund]{
		params:       &params.ListParams,
		page:         func() *stripe.Iter { return p.api.Refunds.List(params).Iter },
		lastResponse: func(l stripe.ListContainer) *stripe.APIResponse { return l.(*stripe.RefundList).LastResponse },
		ident:        func(rf *stripe.Refund) (string, map[string]string) { return rf.ID, rf.Metadata },
	}, func(rf *stripe.Refund) error {
		if pl.Amount != nil && rf.Amount != *pl.Amount {
			return &providers.MismatchError{ProviderRef: rf.ID, Field: "amount",
				Want: strconv.FormatInt(*pl.Amount, 10), Got: strconv.FormatInt(rf.Amount, 10)}
		}
		if rf.PaymentIntent != nil && rf.PaymentIntent.ID != "" && rf.PaymentIntent.ID != pl.PaymentIntent {
			return &providers.MismatchError{ProviderRef: rf.ID, Field: "payment_intent", Want: pl.PaymentIntent, Got: rf.PaymentIntent.ID}
		}
		switch rf.Status {
		case stripe.RefundStatusFailed, stripe.RefundStatusCanceled:
			if inert == nil {
				inert = rf
			}
		default:
			if found == nil {
				found = rf
			}
		}
		return nil
	})
	if err != nil {
		return providers.Result{}, false, err
	}
	switch {
	case found != nil:
		return providers.Result{ProviderRef: found.ID, HTTPStatus: status}, true, nil
	case !complete:
		return providers.Result{}, false, fmt.Errorf("%w: no refund of %s with this intent's namespace and key in the first %d pages of %d, and the listing goes on",
			providers.ErrAbsenceNotProven, pl.PaymentIntent, p.cfg.ReconcileMaxPages, p.pageSize)
	case inert != nil:
		return providers.Result{}, false, &providers.NotPerformedError{ProviderRef: inert.ID, Code: string(inert.FailureReason),
			Message: fmt.Sprintf("refund %s exists for this intent but is %s: nothing was refunded", inert.ID, inert.Status)}
	case req.Namespace == "":
		return providers.Result{}, false, fmt.Errorf("%w: the intent has no namespace, so a refund of %s without one cannot be told from another database's",
			providers.ErrAbsenceNotProven, pl.PaymentIntent)
	}
	return providers.Result{}, false, nil
}

// ---- captures ----

// capturedAmount is what a capture payload asks for: amount_to_capture,
// or the whole PaymentIntent.
func capturedAmount(pl *CapturePayload, pi *stripe.PaymentIntent) int64 {
	if pl.AmountToCapture != nil {
		return *pl.AmountToCapture
	}
	return pi.Amount
}

// performCapture captures the PaymentIntent with the key as
// Idempotency-Key and the intent's identity under the capture's metadata
// keys (CaptureKeyMetadataKey). Stripe refuses to capture a PaymentIntent
// twice with a 400 that carries it: when that PaymentIntent is succeeded
// and received what the payload asks for, the capture is done (a lost
// answer, or someone captured it first) and Perform succeeds with its id.
// Any other answer is classified as Perform's.
func (p *Provider) performCapture(ctx context.Context, req providers.Request, pl *CapturePayload) (providers.Result, error) {
	params := &stripe.PaymentIntentCaptureParams{AmountToCapture: pl.AmountToCapture}
	params.Context = ctx
	params.SetIdempotencyKey(req.IdempotencyKey)
	tagIntent(&params.Params, pl.Metadata, req, captureKeys)
	pi, err := p.api.PaymentIntents.Capture(pl.PaymentIntent, params)
	if err != nil {
		if pi := refusedPaymentIntent(err); pi != nil &&
			pi.Status == stripe.PaymentIntentStatusSucceeded && pi.AmountReceived == capturedAmount(pl, pi) {
			return providers.Result{ProviderRef: pl.PaymentIntent, HTTPStatus: http.StatusBadRequest}, nil
		}
		return providers.Result{}, p.classify(err)
	}
	res := resultOf(pi.ID, pi.LastResponse)
	if pi.Status == stripe.PaymentIntentStatusProcessing {
		return providers.Result{}, &providers.AttemptError{Outcome: providers.OutcomeRetry, HTTPStatus: res.HTTPStatus, Code: "processing",
			Message: fmt.Sprintf("PaymentIntent %s is processing its capture: retried with the same key to read how it ends", pi.ID)}
	}
	return res, nil
}

// reconcileCapture reads the PaymentIntent (GET /v1/payment_intents/{id},
// strongly consistent): succeeded having received what the payload asks
// for is found; still requires_capture is a proven absence; succeeded for
// another amount is a *providers.MismatchError when it carries this
// intent's capture identity, and otherwise, like canceled or never
// authorised, a *providers.NotPerformedError: the capture did not happen
// and cannot.
func (p *Provider) reconcileCapture(ctx context.Context, req providers.Request, pl *CapturePayload) (providers.Result, bool, error) {
	pi, err := p.getPaymentIntent(ctx, pl.PaymentIntent)
	if err != nil {
		return providers.Result{}, false, err
	}
	status := 0
	if pi.LastResponse != nil {
		status = pi.LastResponse.StatusCode
	}
	want := capturedAmount(pl, pi)
	switch pi.Status {
	case stripe.PaymentIntentStatusSucceeded:
		if pi.AmountReceived == want {
			return providers.Result{ProviderRef: pi.ID, HTTPStatus: status}, true, nil
		}
		if pi.Metadata[CaptureNamespaceMetadataKey] == req.Namespace && pi.Metadata[CaptureKeyMetadataKey] == req.IdempotencyKey {
			return providers.Result{}, false, &providers.MismatchError{ProviderRef: pi.ID, Field: "amount_received",
				Want: strconv.FormatInt(want, 10), Got: strconv.FormatInt(pi.AmountReceived, 10)}
		}
		return providers.Result{}, false, &providers.NotPerformedError{ProviderRef: pi.ID, Code: "already_captured",
			Message: fmt.Sprintf("PaymentIntent %s was captured for %d by another request, not for %d: it cannot be captured again", pi.ID, pi.AmountReceived, want)}
	case stripe.PaymentIntentStatusRequiresCapture:
		return providers.Result{}, false, nil
	case stripe.PaymentIntentStatusProcessing:
		return providers.Result{}, false, stillProcessing(pi)
	}
	return providers.Result{}, false, &providers.NotPerformedError{ProviderRef: pi.ID, Code: string(pi.Status),
		Message: fmt.Sprintf("PaymentIntent %s is %s: it was not captured and cannot be", pi.ID, pi.Status)}
}

// ---- cancels ----

// performCancel cancels the PaymentIntent with the key as
// Idempotency-Key. (Stripe's cancel takes no metadata: the PaymentIntent's
// status is the record.) A 400 whose PaymentIntent is already canceled
// means the cancel is done: Perform succeeds with its id. A succeeded
// PaymentIntent cannot be canceled: Stripe's 400, OutcomeFailed.
func (p *Provider) performCancel(ctx context.Context, req providers.Request, pl *CancelPayload) (providers.Result, error) {
	params := &stripe.PaymentIntentCancelParams{}
	if pl.CancellationReason != "" {
		params.CancellationReason = stripe.String(pl.CancellationReason)
	}
	params.Context = ctx
	params.SetIdempotencyKey(req.IdempotencyKey)
	pi, err := p.api.PaymentIntents.Cancel(pl.PaymentIntent, params)
	if err != nil {
		if pi := refusedPaymentIntent(err); pi != nil && pi.Status == stripe.PaymentIntentStatusCanceled {
			return providers.Result{ProviderRef: pl.PaymentIntent, HTTPStatus: http.StatusBadRequest}, nil
		}
		return providers.Result{}, p.classify(err)
	}
	return resultOf(pi.ID, pi.LastResponse), nil
}

// refusedPaymentIntent is the PaymentIntent a Stripe 400 carries, or nil.
// Stripe refuses a capture or cancel that the PaymentIntent's state
// forbids with one, and that state can show the work is already done.
func refusedPaymentIntent(err error) *stripe.PaymentIntent {
	var se *stripe.Error
	if errors.As(err, &se) && se.HTTPStatusCode == http.StatusBadRequest {
		return se.PaymentIntent
	}
	return nil
}

// reconcileCancel reads the PaymentIntent (strongly consistent): canceled
// is found, anything else a proven absence.
func (p *Provider) reconcileCancel(ctx context.Context, pl *CancelPayload) (providers.Result, bool, error) {
	pi, err := p.getPaymentIntent(ctx, pl.PaymentIntent)
	if err != nil {
		return providers.Result{}, false, err
	}
	if pi.Status != stripe.PaymentIntentStatusCanceled {
		return providers.Result{}, false, nil
	}
	res := providers.Result{ProviderRef: pi.ID}
	if pi.LastResponse != nil {
		res.HTTPStatus = pi.LastResponse.StatusCode
	}
	return res, true, nil
}

func (p *Provider) getPaymentIntent(ctx context.Context, id string) (*stripe.PaymentIntent, error) {
	params := &stripe.PaymentIntentParams{}
	params.Context = ctx
	pi, err := p.api.PaymentIntents.Get(id, params)
	if err != nil {
		return nil, p.classifyLookup(err)
	}
	return pi, nil
}

// paymentIntentPlaceholder stands for a PaymentIntent id filled at dispatch
// while a payload is validated (FillPlaceholder).
const paymentIntentPlaceholder = `"pi_FilledAtDispatch"`

// FillPlaceholder implements providers.Filler: the payment_intent of a
// refund, a capture or a cancel may be filled from the provider reference
// of the charge it comes after (its PaymentIntent id).
func (p *Provider) FillPlaceholder(kind, field string) (json.RawMessage, bool) {
	switch kind {
	case KindRefund, KindCapture, KindCancel:
		if field == "payment_intent" {
			return json.RawMessage(paymentIntentPlaceholder), true
		}
	}
	return nil, false
}
