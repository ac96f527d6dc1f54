package stripedouble

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Refund is one refund the double made.
type Refund struct {
	// ID is Stripe-shaped: "re_" followed by 24 alphanumerics.
	ID string
	// PaymentIntent is the refunded PaymentIntent's id.
	PaymentIntent string
	// Amount is what was refunded, in the currency's smallest unit.
	Amount   int64
	Currency string
	// Reason is the request's reason, or empty.
	Reason string
	// Status is "succeeded": the double settles refunds at once.
	Status string
	// Metadata is the request's metadata (never nil).
	Metadata map[string]string
	// Created is the creation time on Config.Now.
	Created time.Time
	// IdempotencyKey and RequestID are those of the request that made it.
	IdempotencyKey string
	RequestID      string
}

func (rf Refund) clone() Refund {
	md := make(map[string]string, len(rf.Metadata))
	for k, v := range rf.Metadata {
		md[k] = v
	}
	rf.Metadata = md
	return rf
}

func (rf *Refund) wire() map[string]any {
	md := make(map[string]string, len(rf.Metadata))
	for k, v := range rf.Metadata {
		md[k] = v
	}
	return map[string]any{
		"id":             rf.ID,
		"object":         "refund",
		"amount":         rf.Amount,
		"charge":         chargeID(rf.PaymentIntent),
		"created":        rf.Created.Unix(),
		"currency":       rf.Currency,
		"metadata":       md,
		"payment_intent": rf.PaymentIntent,
		"reason":         nullable(rf.Reason),
		"status":         rf.Status,
	}
}

// Refunds returns a copy of every refund made, in order.
func (s *Server) Refunds() []Refund {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Refund, len(s.refunds))
	for i, rf := range s.refunds {
		out[i] = rf.clone()
	}
	return out
}

// RefundsFor counts the refunds whose metadata["intent_id"] is intentID:
// for a refund intent performed exactly once, 1.
func (s *Server) RefundsFor(intentID int64) int {
	id := strconv.FormatInt(intentID, 10)
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, rf := range s.refunds {
		if rf.Metadata["intent_id"] == id {
			n++
		}
	}
	return n
}

// Refunded is the total refunded of PaymentIntent id. The double never
// lets it exceed the PaymentIntent's amount_received.
func (s *Server) Refunded(id string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if pi, ok := s.byID[id]; ok {
		return pi.AmountRefunded
	}
	return 0
}

var refundReasons = []string{"duplicate", "fraudulent", "requested_by_customer"}

// ---- POST /v1/refunds ----

// handleRefundCreate refunds a succeeded PaymentIntent, in full (what is
// left) or for amount, honouring Idempotency-Key and drawing faults like a
// create (see keyedPost). As Stripe does, it refuses with a 400 (not
// saved) a PaymentIntent that does not exist or has no successful charge,
// one already refunded in full (charge_already_refunded), and an amount
// larger than what is left (amount_received less what was refunded).
func (s *Server) handleRefundCreate(w http.ResponseWriter, r *http.Request) {
	reqID, ok := s.beginPost(w, r)
	if !ok {
		return
	}
	key := strings.TrimSpace(r.Header.Get("Idempotency-Key"))
	var params refundParams
	check := func() *apiError {
		var e *apiError
		params, e = parseRefund(r.PostForm)
		return e
	}
	act := func() (savedResponse, bool) { return s.refund(params, key, reqID) }
	s.keyedPost(w, r, reqID, mismatchEndpoint, check, act)
}

type refundParams struct {
	paymentIntent string
	amount        int64 // 0: what is left
	reason        string
	metadata      map[string]string
}

// parseRefund validates a refund's form the way Stripe's API does, as far
// as the double needs to.
func parseRefund(form map[string][]string) (refundParams, *apiError) {
	var (
		p refundParams
		e *apiError
	)
	if e = onlyParams(form, "payment_intent", "charge", "amount", "reason", "refund_application_fee", "reverse_transfer", "instructions_email", "origin"); e != nil {
		return p, e
	}
	if p.metadata, e = metadataParams(form); e != nil {
		return p, e
	}
	p.paymentIntent = formValue(form, "payment_intent")
	if p.paymentIntent == "" {
		if formValue(form, "charge") != "" {
			return p, invalid("charge", "", "This test double refunds by payment_intent only.")
		}
		return p, invalid("", "parameter_missing", "One of the following params should be provided for this request: payment_intent or charge.")
	}
	if v := formValue(form, "amount"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return p, invalid("amount", "parameter_invalid_integer", "Invalid integer: "+v)
		}
		if n < 1 {
			return p, invalid("amount", "parameter_invalid_integer", "This value must be greater than or equal to 1.")
		}
		p.amount = n
	}
	p.reason, e = enumParam(form, "reason", refundReasons)
	return p, e
}

// refund makes the refund p asks for, a success saved under the key, or
// refuses it, not saved, when the PaymentIntent cannot be refunded that
// much.
func (s *Server) refund(p refundParams, key, reqID string) (savedResponse, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pi, ok := s.byID[p.paymentIntent]
	if !ok {
		return refusal(reqID, http.StatusBadRequest, apiError{Type: "invalid_request_error", Code: "resource_missing", Param: "payment_intent",
			Message: "No such payment_intent: '" + p.paymentIntent + "'", DocURL: "https://stripe.com/docs/error-codes/resource-missing"})
	}
	amount, e := refundable(pi, p.amount)
	if e != nil {
		return refusal(reqID, http.StatusBadRequest, *e)
	}
	rf := &Refund{
		ID:             newID("re_", 24),
		PaymentIntent:  pi.ID,
		Amount:         amount,
		Currency:       pi.Currency,
		Reason:         p.reason,
		Status:         "succeeded",
		Metadata:       p.metadata,
		Created:        s.now(),
		IdempotencyKey: key,
		RequestID:      reqID,
	}
	pi.AmountRefunded += amount
	s.refunds = append(s.refunds, rf)
	s.effects.Add(rf.Metadata["intent_id"])
	return success(reqID, rf.wire())
}

// refundable is how much a refund of pi for requested (0: what is left)
// takes, or why it cannot: pi has no successful charge, was refunded in
// full, or has less left than requested. The caller holds s.mu.
func refundable(pi *PaymentIntent, requested int64) (int64, *apiError) {
	if pi.Status != "succeeded" {
		return 0, &apiError{Type: "invalid_request_error", Code: "payment_intent_unexpected_state", Param: "payment_intent",
			Message: "This PaymentIntent (" + pi.ID + ") does not have a successful charge to refund: it has a status of " + pi.Status + "."}
	}
	left := pi.received() - pi.AmountRefunded
	if left <= 0 {
		return 0, &apiError{Type: "invalid_request_error", Code: "charge_already_refunded",
			Message: "Charge " + chargeID(pi.ID) + " has already been refunded."}
	}
	want := requested
	if want == 0 {
		want = left
	}
	if want > left {
		return 0, &apiError{Type: "invalid_request_error", Code: "amount_too_large", Param: "amount",
			Message: fmt.Sprintf("Refund amount (%d) is greater than unrefunded amount on charge (%d)", want, left)}
	}
	return want, nil
}

// received is what the PaymentIntent's charge took. The caller holds s.mu.
func (pi *PaymentIntent) received() int64 {
	if pi.Status != "succeeded" {
		return 0
	}
	if pi.AmountReceived != 0 {
		return pi.AmountReceived
	}
	return pi.Amount
}

// ---- GET /v1/refunds ----

// handleRefundList serves GET /v1/refunds as Stripe does, strongly
// consistent: filtered by payment_intent (or charge) and created, limit 1
// to 100 (10 by default), paginated by starting_after or ending_before,
// newest first. Unknown parameters are a 400.
func (s *Server) handleRefundList(w http.ResponseWriter, r *http.Request) {
	s.serveList(w, r, "/v1/refunds", []string{"payment_intent", "charge"}, func(q url.Values, lp listParams) ([]map[string]any, bool, *apiError) {
		piID, byPI := q.Get("payment_intent"), q.Has("payment_intent")
		charge, byCharge := q.Get("charge"), q.Has("charge")
		if _, ok := s.byID[piID]; byPI && !ok {
			return nil, false, invalid("payment_intent", "resource_missing", "No such payment_intent: '"+piID+"'")
		}
		return listPage(s.refunds, lp, "refund", func(rf *Refund) bool {
			return !(byPI && rf.PaymentIntent != piID || byCharge && chargeID(rf.PaymentIntent) != charge)
		})
	})
}

// ---- POST /v1/payment_intents/{id}/capture ----

// handleCapture captures an authorised PaymentIntent (requires_capture),
// optionally for less (amount_to_capture), honouring Idempotency-Key and
// drawing faults like a create (see keyedPost). Its metadata is merged
// into the PaymentIntent's, as Stripe does. A refusal (the PaymentIntent is
// not in requires_capture, already captured included, or the amount is too
// large) is a 400 payment_intent_unexpected_state or amount_too_large
// whose error carries the PaymentIntent, not saved.
func (s *Server) handleCapture(w http.ResponseWriter, r *http.Request) {
	reqID, ok := s.beginPost(w, r)
	if !ok {
		return
	}
	form := r.PostForm
	id := r.PathValue("id")
	var (
		metadata map[string]string
		amount   int64
	)
	check := func() *apiError {
		if e := onlyParams(form, "amount_to_capture"); e != nil {
			return e
		}
		var e *apiError
		if metadata, e = metadataParams(form); e != nil {
			return e
		}
		if v := formValue(form, "amount_to_capture"); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return invalid("amount_to_capture", "parameter_invalid_integer", "Invalid integer: "+v)
			}
			amount = n
		}
		return nil
	}
	act := func() (savedResponse, bool) {
		return s.changePaymentIntent(reqID, id, func(pi *PaymentIntent) *apiError {
			if pi.Status != "requires_capture" {
				return unexpectedState(pi, "This PaymentIntent could not be captured because it has a status of "+pi.Status+". Only a PaymentIntent with one of the following statuses may be captured: requires_capture.")
			}
			take := pi.AmountCapturable
			if amount != 0 {
				if amount < 1 || amount > pi.AmountCapturable {
					return invalid("amount_to_capture", "amount_too_large",
						fmt.Sprintf("The amount_to_capture must be a positive integer no greater than the amount_capturable (%d).", pi.AmountCapturable))
				}
				take = amount
			}
			pi.Status = "succeeded"
			pi.AmountReceived = take
			pi.AmountCapturable = 0
			for k, v := range metadata {
				pi.Metadata[k] = v
			}
			return nil
		})
	}
	s.keyedPost(w, r, reqID, mismatchEndpoint, check, act)
}

// ---- POST /v1/payment_intents/{id}/cancel ----

var cancellationReasons = []string{"duplicate", "fraudulent", "requested_by_customer", "abandoned"}

// cancelable are the statuses Stripe lets a PaymentIntent be canceled in.
var cancelable = []string{"requires_payment_method", "requires_capture", "requires_confirmation", "requires_action", "processing"}

// handleCancel cancels a PaymentIntent that has not succeeded, honouring
// Idempotency-Key and drawing faults like a create (see keyedPost). A
// PaymentIntent that succeeded or is already canceled is a 400
// payment_intent_unexpected_state carrying the PaymentIntent, as Stripe
// answers, not saved.
func (s *Server) handleCancel(w http.ResponseWriter, r *http.Request) {
	reqID, ok := s.beginPost(w, r)
	if !ok {
		return
	}
	form := r.PostForm
	id := r.PathValue("id")
	var reason string
	check := func() *apiError {
		for k := range form {
			if strings.HasPrefix(k, "metadata[") {
				return invalid(k, "parameter_unknown", "Received unknown parameter: "+k)
			}
		}
		if e := onlyParams(form, "cancellation_reason"); e != nil {
			return e
		}
		var e *apiError
		reason, e = enumParam(form, "cancellation_reason", cancellationReasons)
		return e
	}
	act := func() (savedResponse, bool) {
		return s.changePaymentIntent(reqID, id, func(pi *PaymentIntent) *apiError {
			if !slices.Contains(cancelable, pi.Status) {
				return unexpectedState(pi, "You cannot cancel this PaymentIntent because it has a status of "+pi.Status+". Only a PaymentIntent with one of the following statuses may be canceled: "+strings.Join(cancelable, ", ")+".")
			}
			pi.Status = "canceled"
			pi.CancellationReason = reason
			pi.CanceledAt = s.now()
			pi.AmountCapturable = 0
			return nil
		})
	}
	s.keyedPost(w, r, reqID, mismatchEndpoint, check, act)
}

// changePaymentIntent is the act of a POST on one PaymentIntent (capture,
// cancel): under s.mu it looks id up, a 404 when there is none, and has
// change check the PaymentIntent's state and change it. change's error is
// a 400 refusal, nothing changed; otherwise the answer is the changed
// PaymentIntent, saved.
func (s *Server) changePaymentIntent(reqID, id string, change func(pi *PaymentIntent) *apiError) (savedResponse, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pi, ok := s.byID[id]
	if !ok {
		return refusal(reqID, http.StatusNotFound, apiError{Type: "invalid_request_error", Code: "resource_missing", Param: "intent",
			Message: "No such payment_intent: '" + id + "'"})
	}
	if e := change(pi); e != nil {
		return refusal(reqID, http.StatusBadRequest, *e)
	}
	return success(reqID, pi.wire())
}

// unexpectedState refuses an action on pi in its current status. Stripe's
// error carries the PaymentIntent, so a client sees what it has become.
func unexpectedState(pi *PaymentIntent, message string) *apiError {
	return &apiError{Type: "invalid_request_error", Code: "payment_intent_unexpected_state",
		Message:       message,
		DocURL:        "https://stripe.com/docs/error-codes/payment-intent-unexpected-state",
		PaymentIntent: pi.wire()}
}

// SeedPaymentIntent stores pi as if it had been created earlier (by
// another system, say), so that tests can refund, capture or cancel a
// PaymentIntent whose id they know in advance. An empty ID gets a fresh
// one, an empty Status "succeeded", a zero Created Config.Now, an empty
// Currency "usd". It is not counted as an effect. It returns the stored
// PaymentIntent's copy, or false when the id is taken.
func (s *Server) SeedPaymentIntent(pi PaymentIntent) (PaymentIntent, bool) {
	pi = pi.clone()
	if pi.ID == "" {
		pi.ID = newID("pi_", 24)
	}
	if pi.Status == "" {
		pi.Status = "succeeded"
	}
	if pi.Currency == "" {
		pi.Currency = "usd"
	}
	if pi.CaptureMethod == "" {
		pi.CaptureMethod = "automatic"
	}
	if pi.Status == "requires_capture" && pi.AmountCapturable == 0 {
		pi.AmountCapturable = pi.Amount
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if pi.Created.IsZero() {
		pi.Created = s.now()
	}
	pi.SearchableAt = pi.Created.Add(s.searchLag)
	if _, taken := s.byID[pi.ID]; taken {
		return PaymentIntent{}, false
	}
	stored := pi
	s.pis = append(s.pis, &stored)
	s.byID[stored.ID] = &stored
	return stored.clone(), true
}
