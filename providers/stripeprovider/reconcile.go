package stripeprovider

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	stripe "github.com/stripe/stripe-go/v76"

	"github.com/outboxkit/outbox/providers"
)

// Reconcile asks Stripe whether it already created the PaymentIntent req
// describes, as providers.Provider's Reconcile documents.
//
// When req.Namespace is set it lists PaymentIntents with
// GET /v1/payment_intents, which is strongly consistent: filtered by the
// payload's customer when it has one, created no earlier than
// req.KeyFirstUsedAt less ListClockSkewMargin (no lower bound when
// KeyFirstUsedAt is zero), newest first, 100 a page, at most
// Config.ReconcileMaxPages pages. A PaymentIntent belongs to the intent only
// if its metadata carries both req.Namespace ("outbox_namespace") and
// req.IdempotencyKey ("outbox_key"); anything else, another deployment's
// PaymentIntent with the same intent id included, is ignored. Then:
//
//   - an owned PaymentIntent whose amount, currency or customer differs
//     from the payload: a *providers.MismatchError, never adopted;
//   - an owned PaymentIntent in a state showing the effect (any state but
//     canceled for a payload that does not confirm; succeeded or
//     requires_capture for one that does): found=true with its id;
//   - otherwise an owned, confirmed PaymentIntent still processing: an
//     error wrapping providers.ErrAbsenceNotProven, neither found nor
//     absent, so the intent is looked up again later;
//   - only owned PaymentIntents that show no effect (declined, awaiting the
//     customer's action): found=false and a *providers.NotPerformedError
//     saying which and why: the charge did not happen, and repeating it
//     would be answered the same way;
//   - nothing owned in the whole listing: found=false, nil, a proven
//     absence;
//   - the page bound reached with more to list: an error wrapping
//     providers.ErrAbsenceNotProven.
//
// When req.Namespace is empty (an intent recorded before namespaces
// existed, whose PaymentIntents carry only metadata["intent_id"]), it
// falls back to Stripe's search by intent id. Search is eventually
// consistent and intent ids repeat across databases, so this path never
// proves absence: not found is an error wrapping
// providers.ErrAbsenceNotProven. A PaymentIntent carrying any namespace, or
// another outbox_key, is not the intent's; one that carries only the intent
// id is adopted only if its amount, currency and customer match the payload.
//
// Failures to ask (Stripe unreachable, a 5xx, a 429, a 400 or 404 for an
// object of another account or mode) are *providers.LookupError values
// naming what the look-up needs; none of them is "not found", and none
// proves anything.
//
// KindRefund, KindCapture and KindCancel are looked up by reconcileRefund,
// reconcileCapture and reconcileCancel (money.go), all strongly consistent
// reads.
func (p *Provider) Reconcile(ctx context.Context, req providers.Request) (providers.Result, bool, error) {
	if !slices.Contains(p.Kinds(), req.Kind) {
		return providers.Result{}, false, providers.UnknownKindError(req.Kind)
	}
	if err := p.ready(); err != nil {
		return providers.Result{}, false, err
	}
	decoded, err := decodeAny(req.Kind, req.Payload)
	if err != nil {
		// Without the payload nothing found could be checked against it.
		return providers.Result{}, false, fmt.Errorf("stripeprovider: cannot reconcile an intent whose payload is invalid: %w", err)
	}
	switch d := decoded.(type) {
	case *CancelPayload:
		return p.reconcileCancel(ctx, d)
	case *RefundPayload:
		if !hasKey(req) {
			return providers.Result{}, false, errReconcileWithoutKey
		}
		return p.reconcileRefund(ctx, req, d)
	case *CapturePayload:
		if !hasKey(req) {
			return providers.Result{}, false, errReconcileWithoutKey
		}
		return p.reconcileCapture(ctx, req, d)
	}
	pl := decoded.(*PaymentIntentPayload)
	if req.Namespace == "" {
		return p.reconcileLegacy(ctx, req, pl)
	}
	if !hasKey(req) {
		return providers.Result{}, false, errReconcileWithoutKey
	}
	return p.reconcileListed(ctx, req, pl)
}

var errReconcileWithoutKey = errors.New("stripeprovider: cannot reconcile an intent without an idempotency key")

func hasKey(req providers.Request) bool { return strings.TrimSpace(req.IdempotencyKey) != "" }

// reconcileListed looks up a namespaced intent's PaymentIntent in the
// listing, as Reconcile documents.
func (p *Provider) reconcileListed(ctx context.Context, req providers.Request, pl *PaymentIntentPayload) (providers.Result, bool, error) {
	confirm := isTrue(pl.Confirm)
	var owned ownedPaymentIntents
	status, complete, err := scanOwned(p, req, p.paymentIntentList(ctx, req, pl), func(pi *stripe.PaymentIntent) error {
		return owned.add(pi, pl, confirm)
	})
	if err != nil {
		return providers.Result{}, false, err
	}
	return p.listedVerdict(owned, status, complete)
}

// paymentIntentList lists PaymentIntents newest first, one page of
// p.pageSize a call: the payload's customer's, when it has one, created no
// earlier than req.KeyFirstUsedAt less ListClockSkewMargin.
func (p *Provider) paymentIntentList(ctx context.Context, req providers.Request, pl *PaymentIntentPayload) ownedList[*stripe.PaymentIntent] {
	params := &stripe.PaymentIntentListParams{}
	params.Context = ctx
	params.Single = true // one page per call: scanOwned's bound counts them
	params.Limit = stripe.Int64(p.pageSize)
	if pl.Customer != "" {
		params.Customer = stripe.String(pl.Customer)
	}
	if !req.KeyFirstUsedAt.IsZero() {
		params.CreatedRange = &stripe.RangeQueryParams{GreaterThanOrEqual: req.KeyFirstUsedAt.Add(-ListClockSkewMargin).Unix()}
	}
	return ownedList[*stripe.PaymentIntent]{
		params: &params.ListParams,
		page:   func() *stripe.Iter { return p.api.PaymentIntents.List(params).Iter },
		lastResponse: func(l stripe.ListContainer) *stripe.APIResponse {
			return l.(*stripe.PaymentIntentList).LastResponse
		},
		ident: func(pi *stripe.PaymentIntent) (string, map[string]string) { return pi.ID, pi.Metadata },
	}
}

// ownedPaymentIntents are the first PaymentIntents carrying the intent's
// namespace and key found in each state that decides Reconcile's answer.
type ownedPaymentIntents struct {
	found    *stripe.PaymentIntent // shows the effect
	settling *stripe.PaymentIntent // confirmed and still processing
	inert    *stripe.PaymentIntent // shows no effect
}

// add sorts pi in, or ends the listing with a *providers.MismatchError
// when pi differs from the payload.
func (o *ownedPaymentIntents) add(pi *stripe.PaymentIntent, pl *PaymentIntentPayload, confirm bool) error {
	if mm := mismatch(pi, pl); mm != nil {
		return mm
	}
	switch {
	case effective(pi, confirm):
		if o.found == nil {
			o.found = pi
		}
	case pi.Status == stripe.PaymentIntentStatusProcessing:
		if o.settling == nil {
			o.settling = pi
		}
	case o.inert == nil:
		o.inert = pi
	}
	return nil
}

// listedVerdict is Reconcile's answer from what the listing owned, its last
// page's status and whether it was read to its end.
func (p *Provider) listedVerdict(owned ownedPaymentIntents, status int, complete bool) (providers.Result, bool, error) {
	switch {
	case owned.found != nil:
		// The effect exists. (A mismatch further down an unfinished
		// listing would not undo it.)
		return providers.Result{ProviderRef: owned.found.ID, HTTPStatus: status}, true, nil
	case owned.settling != nil:
		return providers.Result{}, false, stillProcessing(owned.settling)
	case !complete && owned.inert != nil:
		return providers.Result{}, false, fmt.Errorf("%w: PaymentIntent %s carries this intent's key but is %s, and the listing stopped after %d pages of %d before its end",
			providers.ErrAbsenceNotProven, owned.inert.ID, owned.inert.Status, p.cfg.ReconcileMaxPages, p.pageSize)
	case !complete:
		return providers.Result{}, false, fmt.Errorf("%w: no PaymentIntent with this intent's namespace and key in the first %d pages of %d, and the listing goes on",
			providers.ErrAbsenceNotProven, p.cfg.ReconcileMaxPages, p.pageSize)
	case owned.inert != nil:
		return providers.Result{}, false, p.noEffect(owned.inert)
	}
	return providers.Result{}, false, nil
}

// reconcileLegacy looks up an intent recorded before namespaces existed by
// Stripe's search on metadata["intent_id"]. It never proves absence.
func (p *Provider) reconcileLegacy(ctx context.Context, req providers.Request, pl *PaymentIntentPayload) (providers.Result, bool, error) {
	confirm := pl.Confirm != nil && *pl.Confirm
	params := &stripe.PaymentIntentSearchParams{}
	params.Context = ctx
	params.Query = fmt.Sprintf("metadata['%s']:'%d'", IntentIDMetadataKey, req.IntentID)
	params.Limit = stripe.Int64(100)
	iter := p.api.PaymentIntents.Search(params)
	var (
		inert   *stripe.PaymentIntent
		skipped []string
	)
	for iter.Next() {
		pi := iter.PaymentIntent()
		if pi.Metadata[NamespaceMetadataKey] != "" {
			continue // a namespaced deployment's: never a legacy intent's
		}
		key, keyed := pi.Metadata[KeyMetadataKey]
		if keyed && key != req.IdempotencyKey {
			continue // another intent's
		}
		if mm := mismatch(pi, pl); mm != nil {
			if keyed {
				return providers.Result{}, false, mm // it carries our key: never adopt, say so
			}
			skipped = append(skipped, fmt.Sprintf("%s carries only this intent's id, and its %s is %s, not %s", pi.ID, mm.Field, mm.Got, mm.Want))
			continue // only the intent id matches: most likely another database's
		}
		if confirm && pi.Status == stripe.PaymentIntentStatusProcessing {
			return providers.Result{}, false, stillProcessing(pi)
		}
		if effective(pi, confirm) {
			res := providers.Result{ProviderRef: pi.ID}
			if lr := iter.PaymentIntentSearchResult().LastResponse; lr != nil {
				res.HTTPStatus = lr.StatusCode
			}
			return res, true, nil
		}
		if keyed && inert == nil {
			inert = pi
		}
		if !keyed {
			skipped = append(skipped, fmt.Sprintf("%s carries only this intent's id and is %s", pi.ID, pi.Status))
		}
	}
	if err := iter.Err(); err != nil {
		return providers.Result{}, false, p.classifyLookup(err)
	}
	if inert != nil {
		return providers.Result{}, false, p.noEffect(inert)
	}
	ignored := ""
	if len(skipped) > 0 {
		ignored = " (ignored: " + strings.Join(skipped, "; ") + ")"
	}
	return providers.Result{}, false, fmt.Errorf("%w: the intent has no namespace, and Stripe's search by intent_id %d (eventually consistent) found no PaymentIntent of it%s",
		providers.ErrAbsenceNotProven, req.IntentID, ignored)
}

// noEffect is Reconcile's answer for an owned PaymentIntent that shows no
// effect: the payment was declined or awaits the customer.
func (p *Provider) noEffect(pi *stripe.PaymentIntent) *providers.NotPerformedError {
	np := &providers.NotPerformedError{ProviderRef: pi.ID, Code: string(pi.Status),
		Message: fmt.Sprintf("PaymentIntent %s exists for this intent but is %s", pi.ID, pi.Status)}
	if le := pi.LastPaymentError; le != nil {
		np.Code = string(le.DeclineCode)
		if np.Code == "" {
			np.Code = string(le.Code)
		}
		if le.Msg != "" {
			np.Message += ": " + p.scrub(le.Msg)
		}
	}
	return np
}

// mismatch compares a PaymentIntent's essential parameters with the
// payload's: amount, currency and customer.
func mismatch(pi *stripe.PaymentIntent, pl *PaymentIntentPayload) *providers.MismatchError {
	customer := ""
	if pi.Customer != nil {
		customer = pi.Customer.ID
	}
	switch {
	case pi.Amount != *pl.Amount:
		return &providers.MismatchError{ProviderRef: pi.ID, Field: "amount", Want: strconv.FormatInt(*pl.Amount, 10), Got: strconv.FormatInt(pi.Amount, 10)}
	case string(pi.Currency) != *pl.Currency:
		return &providers.MismatchError{ProviderRef: pi.ID, Field: "currency", Want: *pl.Currency, Got: string(pi.Currency)}
	case customer != pl.Customer:
		return &providers.MismatchError{ProviderRef: pi.ID, Field: "customer", Want: quoteEmpty(pl.Customer), Got: quoteEmpty(customer)}
	}
	return nil
}

func quoteEmpty(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// effective reports whether a PaymentIntent shows the effect: for a
// confirming payload, succeeded or requires_capture (authorised); for one
// that does not confirm, any state but canceled. A confirmed PaymentIntent
// still processing shows nothing yet (see stillProcessing).
func effective(pi *stripe.PaymentIntent, confirm bool) bool {
	if !confirm {
		return pi.Status != stripe.PaymentIntentStatusCanceled
	}
	switch pi.Status {
	case stripe.PaymentIntentStatusSucceeded, stripe.PaymentIntentStatusRequiresCapture:
		return true
	}
	return false
}

// stillProcessing is Reconcile's answer for an owned PaymentIntent that is
// processing: it exists but has not settled, so neither found nor absent;
// the intent stays in_doubt and is looked up again later.
func stillProcessing(pi *stripe.PaymentIntent) error {
	return fmt.Errorf("%w: PaymentIntent %s carries this intent's key and is still processing: look again once Stripe settles it",
		providers.ErrAbsenceNotProven, pi.ID)
}
