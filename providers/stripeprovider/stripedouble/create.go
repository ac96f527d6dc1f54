package stripedouble

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/outboxkit/outbox/providers/fault"
)

// ---- POST /v1/payment_intents ----

// handleCreate creates a PaymentIntent, honouring Idempotency-Key and
// drawing faults as keyedPost does. Every answer of create is saved, a
// decline included, as Stripe saves it.
func (s *Server) handleCreate(w http.ResponseWriter, r *http.Request) {
	reqID, ok := s.beginPost(w, r)
	if !ok {
		return
	}
	key := strings.TrimSpace(r.Header.Get("Idempotency-Key"))
	var params createParams
	check := func() *apiError {
		var e *apiError
		params, e = parseCreate(r.PostForm)
		return e
	}
	act := func() (savedResponse, bool) { return s.create(params, key, reqID), true }
	s.keyedPost(w, r, reqID, mismatchParams, check, act)
}

func (s *Server) replay(w http.ResponseWriter, r *http.Request, reqID string, saved savedResponse, f fault.Fault) {
	switch f.Kind {
	case fault.Delay:
		s.countFault(f.Kind)
		sleep(r.Context(), f.Delay)
	case fault.LoseResponse:
		s.countFault(f.Kind)
		fault.DropConnection(w)
		return
	}
	w.Header().Set("Idempotent-Replayed", "true")
	w.Header().Set("Original-Request", saved.requestID)
	s.write(w, r, reqID, saved.status, saved.body)
}

func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

type createParams struct {
	amount                    int64
	currency                  string
	customer                  string
	paymentMethod             string
	confirm                   bool
	description               string
	receiptEmail              string
	statementDescriptorSuffix string
	metadata                  map[string]string
	captureMethod             string
	offSession                bool
	setupFutureUsage          string
	returnURL                 string
	paymentMethodTypes        []string
	automaticPaymentMethods   bool
	allowRedirects            string
}

var knownParams = map[string]bool{
	"amount": true, "currency": true, "customer": true, "payment_method": true, "confirm": true,
	"description": true, "receipt_email": true, "statement_descriptor_suffix": true,
	"statement_descriptor": true, "capture_method": true, "confirmation_method": true,
	"setup_future_usage": true, "off_session": true, "return_url": true, "on_behalf_of": true,
	"transfer_group": true, "application_fee_amount": true, "use_stripe_sdk": true,
}

var knownPrefixes = []string{"expand[", "payment_method_types[", "automatic_payment_methods[", "payment_method_options[", "shipping[", "transfer_data[", "mandate_data[", "payment_method_data["}

var currencyRE = regexp.MustCompile(`^[a-z]{3}$`)

func invalid(param, code, msg string) *apiError {
	return &apiError{Type: "invalid_request_error", Code: code, Param: param, Message: msg}
}

// parseCreate validates the form the way Stripe's API does, as far as the
// double needs to.
func parseCreate(form map[string][]string) (createParams, *apiError) {
	var (
		p createParams
		e *apiError
	)
	if p.metadata, e = parseCreateNames(form); e != nil {
		return p, e
	}
	if p.amount, e = amountParam(form); e != nil {
		return p, e
	}
	if p.currency, e = currencyParam(form); e != nil {
		return p, e
	}
	if p.confirm, _, e = boolParam(form, "confirm"); e != nil {
		return p, e
	}
	if p.customer, e = customerParam(form); e != nil {
		return p, e
	}
	p.paymentMethod = formValue(form, "payment_method")
	p.description = formValue(form, "description")
	p.receiptEmail = formValue(form, "receipt_email")
	if p.statementDescriptorSuffix, e = statementDescriptorSuffixParam(form); e != nil {
		return p, e
	}
	if e = checkAmountInCurrency(p.amount, p.currency); e != nil {
		return p, e
	}
	return p, parseCharge(form, &p)
}

// parseCreateNames checks every parameter's name, in sorted order so that a
// form is always refused for the same parameter: a known one passes, a
// metadata[...] one is read into the metadata returned if Stripe accepts
// its key and value, and any other is refused.
func parseCreateNames(form map[string][]string) (map[string]string, *apiError) {
	md := map[string]string{}
	for _, k := range slices.Sorted(maps.Keys(form)) {
		v := form[k][len(form[k])-1]
		if mk, ok := strings.CutPrefix(k, "metadata["); ok && strings.HasSuffix(mk, "]") {
			mk = strings.TrimSuffix(mk, "]")
			switch {
			case mk == "" || strings.ContainsAny(mk, "[]"):
				return nil, invalid(k, "parameter_unknown", "Invalid metadata key: "+mk)
			case len(mk) > 40:
				return nil, invalid(k, "", "Metadata keys can be at most 40 characters long. Invalid key: "+mk)
			case len(v) > 500:
				return nil, invalid(k, "", "Metadata values can have up to 500 characters, but you passed in a value that is "+strconv.Itoa(len(v))+" characters. Invalid value: "+v[:20]+"...")
			}
			md[mk] = v
			continue
		}
		if knownParams[k] {
			continue
		}
		if slices.ContainsFunc(knownPrefixes, func(pre string) bool { return strings.HasPrefix(k, pre) }) {
			continue
		}
		return nil, invalid(k, "parameter_unknown", "Received unknown parameter: "+k)
	}
	if len(md) > 50 {
		return nil, invalid("metadata", "", "Metadata can have up to 50 keys, but you passed in "+strconv.Itoa(len(md))+" keys.")
	}
	return md, nil
}

// amountParam reads the required amount, in the currency's smallest unit.
func amountParam(form map[string][]string) (int64, *apiError) {
	amount, ok := formParam(form, "amount")
	if !ok || amount == "" {
		return 0, invalid("amount", "parameter_missing", "Missing required param: amount.")
	}
	n, err := strconv.ParseInt(amount, 10, 64)
	if err != nil {
		return 0, invalid("amount", "parameter_invalid_integer", "Invalid integer: "+amount)
	}
	if n < 1 {
		return 0, invalid("amount", "parameter_invalid_integer", "This value must be greater than or equal to 1.")
	}
	if n > 99999999 {
		return 0, invalid("amount", "amount_too_large", "Amount must be no more than $999,999.99")
	}
	return n, nil
}

// currencyParam reads the required currency, lower-cased.
func currencyParam(form map[string][]string) (string, *apiError) {
	currency, ok := formParam(form, "currency")
	if !ok || currency == "" {
		return "", invalid("currency", "parameter_missing", "Missing required param: currency.")
	}
	if !currencyRE.MatchString(strings.ToLower(currency)) {
		return "", invalid("currency", "", "Invalid currency: "+currency+". Stripe currently supports these currencies: usd, eur, gbp, ...")
	}
	return strings.ToLower(currency), nil
}

// customerParam reads customer. The double has no customers of its own:
// any id shaped like one exists.
func customerParam(form map[string][]string) (string, *apiError) {
	customer := formValue(form, "customer")
	if customer != "" && !strings.HasPrefix(customer, "cus_") {
		return "", invalid("customer", "resource_missing", "No such customer: '"+customer+"'")
	}
	return customer, nil
}

func statementDescriptorSuffixParam(form map[string][]string) (string, *apiError) {
	suffix := formValue(form, "statement_descriptor_suffix")
	if len(suffix) > 22 {
		return "", invalid("statement_descriptor_suffix", "", "The statement descriptor suffix must be at most 22 characters.")
	}
	if suffix != "" && strings.IndexFunc(suffix, unicode.IsLetter) < 0 {
		return "", invalid("statement_descriptor_suffix", "", "The statement descriptor suffix must contain at least one letter.")
	}
	return suffix, nil
}

// checkAmountInCurrency refuses an amount the currency cannot be charged:
// below its minimum, or not in whole hundredths of a three-decimal
// currency.
func checkAmountInCurrency(amount int64, currency string) *apiError {
	if threeDecimal[currency] && amount%10 != 0 {
		return invalid("amount", "invalid_amount", "For "+strings.ToUpper(currency)+", the amount must be a multiple of 10: Stripe charges three-decimal currencies in whole hundredths.")
	}
	if minimum, ok := minimumAmounts[currency]; ok && amount < minimum {
		return invalid("amount", "amount_too_small", fmt.Sprintf("Amount must be at least %d %s.", minimum, currency))
	}
	return nil
}

// minimumAmounts is Stripe's minimum charge table, in smallest units.
var minimumAmounts = map[string]int64{
	"usd": 50, "aed": 200, "aud": 50, "bgn": 100, "brl": 50, "cad": 50,
	"chf": 50, "czk": 1500, "dkk": 250, "eur": 50, "gbp": 30, "hkd": 400,
	"huf": 17500, "inr": 50, "jpy": 50, "mxn": 1000, "myr": 200, "nok": 300,
	"nzd": 50, "pln": 200, "ron": 200, "sek": 300, "sgd": 50, "thb": 1000,
}

var threeDecimal = map[string]bool{"bhd": true, "jod": true, "kwd": true, "omr": true, "tnd": true}

// MsgReturnURLRequired is Stripe's 400 for a confirmation that may need a
// redirect but has no return_url.
const MsgReturnURLRequired = "A `return_url` must be specified because this Payment Intent is configured to automatically accept the payment methods enabled in the Dashboard, some of which may require a full page redirect to succeed. If you do not want to accept redirect-based payment methods, set `automatic_payment_methods[enabled]` to `true` and `automatic_payment_methods[allow_redirects]` to `never` when creating Setup Intents and Payment Intents."

// parseCharge reads and checks the parameters that decide how the payment
// is confirmed, refusing what Stripe refuses.
func parseCharge(form map[string][]string, p *createParams) *apiError {
	var (
		e        *apiError
		offGiven bool
	)
	if p.captureMethod, e = enumParam(form, "capture_method", captureMethods); e != nil {
		return e
	}
	if p.captureMethod == "" {
		p.captureMethod = "automatic"
	}
	if p.setupFutureUsage, e = enumParam(form, "setup_future_usage", futureUsages); e != nil {
		return e
	}
	if p.offSession, offGiven, e = boolParam(form, "off_session"); e != nil {
		return e
	}
	apmGiven, e := parseAutomaticPaymentMethods(form, p)
	if e != nil {
		return e
	}
	p.paymentMethodTypes = paymentMethodTypes(form)
	if apmGiven && len(p.paymentMethodTypes) > 0 {
		return invalid("automatic_payment_methods", "", "You may only specify one of these parameters: automatic_payment_methods, payment_method_types.")
	}
	p.returnURL = formValue(form, "return_url")
	return checkConfirmation(p, offGiven, apmGiven)
}

var (
	captureMethods  = []string{"automatic", "automatic_async", "manual"}
	futureUsages    = []string{"on_session", "off_session"}
	redirectChoices = []string{"always", "never"}
)

// parseAutomaticPaymentMethods reads automatic_payment_methods[enabled]
// and [allow_redirects], and reports whether [enabled] was given.
func parseAutomaticPaymentMethods(form map[string][]string, p *createParams) (given bool, e *apiError) {
	if p.automaticPaymentMethods, given, e = boolParam(form, "automatic_payment_methods[enabled]"); e != nil {
		return given, e
	}
	if p.allowRedirects, e = enumParam(form, "automatic_payment_methods[allow_redirects]", redirectChoices); e != nil {
		return given, e
	}
	if p.allowRedirects != "" && !given {
		return given, invalid("automatic_payment_methods[enabled]", "parameter_missing", "Missing required param: automatic_payment_methods[enabled].")
	}
	return given, nil
}

// paymentMethodTypes reads payment_method_types[0], [1], ... in the order
// of their sorted names; nil when there are none.
func paymentMethodTypes(form map[string][]string) []string {
	var names []string
	for k := range form {
		if strings.HasPrefix(k, "payment_method_types[") {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	var types []string
	for _, k := range names {
		types = append(types, formValue(form, k))
	}
	return types
}

// checkConfirmation refuses the combinations Stripe refuses of confirm,
// off_session, return_url, the payment method and the payment method
// types.
func checkConfirmation(p *createParams, offGiven, apmGiven bool) *apiError {
	switch {
	case offGiven && !p.confirm:
		return invalid("off_session", "", "You can only use `off_session` when `confirm=true`.")
	case p.returnURL != "" && !p.confirm:
		return invalid("return_url", "", "You can only use `return_url` when `confirm=true`.")
	case p.confirm && p.paymentMethod == "":
		return invalid("payment_method", "payment_intent_unexpected_state", "You cannot confirm this PaymentIntent because it's missing a payment method. To confirm the PaymentIntent with "+
			"a customer, you must provide a payment method.")
	case p.confirm && p.returnURL == "" && len(p.paymentMethodTypes) == 0 && (!apmGiven || (p.automaticPaymentMethods && p.allowRedirects != "never")):
		// From API version 2023-08-16 on, a PaymentIntent without
		// payment_method_types uses the Dashboard's payment methods,
		// redirect-based ones included.
		return invalid("return_url", "", MsgReturnURLRequired)
	case p.offSession && p.setupFutureUsage == "on_session":
		return invalid("setup_future_usage", "", "You cannot set `setup_future_usage` to `on_session` when `off_session` is true. Set `setup_future_usage` to `off_session` instead.")
	}
	return nil
}

// create records a PaymentIntent and returns the response Stripe would save:
// 200 with the PaymentIntent, or 402 when its card is declined.
func (s *Server) create(p createParams, key, reqID string) savedResponse {
	pi := &PaymentIntent{
		ID:                        newID("pi_", 24),
		Amount:                    p.amount,
		Currency:                  p.currency,
		Customer:                  p.customer,
		PaymentMethod:             p.paymentMethod,
		Description:               p.description,
		ReceiptEmail:              p.receiptEmail,
		StatementDescriptorSuffix: p.statementDescriptorSuffix,
		Confirm:                   p.confirm,
		CaptureMethod:             p.captureMethod,
		OffSession:                p.offSession,
		SetupFutureUsage:          p.setupFutureUsage,
		ReturnURL:                 p.returnURL,
		PaymentMethodTypes:        p.paymentMethodTypes,
		AutomaticPaymentMethods:   p.automaticPaymentMethods,
		AllowRedirects:            p.allowRedirects,
		Status:                    "requires_confirmation",
		Metadata:                  p.metadata,
		Created:                   s.now(),
		IdempotencyKey:            key,
		RequestID:                 reqID,
	}
	if pi.PaymentMethod == "" {
		pi.Status = "requires_payment_method"
	}
	s.mu.Lock()
	pi.SearchableAt = pi.Created.Add(s.searchLag)
	decline, declined := s.declines[p.paymentMethod]
	if p.paymentMethod == AuthenticationRequiredCard && p.offSession {
		decline, declined = "authentication_required", true
	}
	if p.confirm && p.paymentMethod != "" {
		switch {
		case declined:
			pi.Status = "requires_payment_method"
			pi.DeclineCode = decline
		case s.actions[p.paymentMethod] || p.paymentMethod == AuthenticationRequiredCard:
			pi.Status = "requires_action"
		case p.paymentMethod == ProcessingPaymentMethod:
			pi.Status = "processing"
		case p.captureMethod == "manual":
			pi.Status = "requires_capture"
			pi.AmountCapturable = pi.Amount
		default:
			pi.Status = "succeeded"
		}
	}
	s.pis = append(s.pis, pi)
	s.effects.Add(pi.Metadata["intent_id"])
	s.byID[pi.ID] = pi
	wire := pi.wire()
	s.mu.Unlock()

	if pi.DeclineCode != "" {
		code := "card_declined"
		if pi.DeclineCode == "authentication_required" {
			code = "authentication_required"
		}
		return savedResponse{status: http.StatusPaymentRequired, requestID: reqID, body: errorBody(apiError{
			Type:          "card_error",
			Code:          code,
			DeclineCode:   pi.DeclineCode,
			Message:       declineMessage(pi.DeclineCode),
			DocURL:        "https://stripe.com/docs/error-codes/card-declined",
			Charge:        chargeID(pi.ID),
			PaymentIntent: wire,
			RequestLogURL: "https://dashboard.stripe.com/test/logs/" + reqID,
		})}
	}
	body, _ := json.Marshal(wire)
	return savedResponse{status: http.StatusOK, body: body, requestID: reqID}
}

func declineMessage(code string) string {
	switch code {
	case "insufficient_funds":
		return "Your card has insufficient funds."
	case "expired_card":
		return "Your card has expired."
	case "incorrect_cvc":
		return "Your card's security code is incorrect."
	case "authentication_required":
		return "Your card was declined. This transaction requires authentication."
	default:
		return "Your card was declined."
	}
}

func chargeID(piID string) string { return "ch_" + strings.TrimPrefix(piID, "pi_") }
