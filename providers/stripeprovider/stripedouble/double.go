// Package stripedouble is a local HTTP server that speaks enough of Stripe's
// API for the real stripe-go v76 client to be pointed at it unchanged: it
// creates, fetches, lists and searches PaymentIntents, and honours
// Idempotency-Key the way Stripe documents it (see PROVIDERS.md):
//
//   - the same key with the same parameters replays the first saved response
//     (200, 402 card_error or 500 api_error) with "Idempotent-Replayed: true"
//     and an "Original-Request" header, without acting again;
//   - the same key with different parameters is a 400 idempotency_error;
//   - the same key while its first request is still executing is a 409
//     invalid_request_error with code idempotency_key_in_use;
//   - validation 400s, 401s, 429s and 409s are not saved: a retry with the
//     key executes afresh;
//   - a key is forgotten KeyRetention (24 h) after its first use, measured on
//     Config.Now, after which a reuse executes as a new request.
//
// Listing (GET /v1/payment_intents) is strongly consistent, as Stripe's list
// endpoints are: a PaymentIntent is listed as soon as it is created. Search
// (GET /v1/payment_intents/search) is eventually consistent when
// Config.SearchLag is set: a PaymentIntent becomes searchable only SearchLag
// after its creation, on Config.Now, so a test can show search missing what
// listing finds.
//
// POST /v1/payment_intents/{id}/capture captures an authorised
// PaymentIntent (requires_capture) and refuses, as Stripe does, to capture
// one in any other state; POST /v1/payment_intents/{id}/cancel cancels one
// that has not succeeded. POST /v1/refunds refunds a succeeded
// PaymentIntent and keeps the money straight: never more refunded than was
// received. GET /v1/refunds lists refunds, strongly consistent. Captures,
// cancels and refunds honour Idempotency-Key exactly like creates.
//
// Faults from package fault are injected into POST /v1/payment_intents and
// the captures, cancels and refunds, one per request, and interpreted the way Stripe would show them (see
// Server.Handler). The double counts the PaymentIntents and refunds it made per intent
// id (the "intent_id" metadata the outbox adapter sends): that count, not the
// dispatcher's bookkeeping, is what exactly-once tests assert on.
//
// Everything is safe for concurrent use.
package stripedouble

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/outboxkit/outbox/providers/fault"
	"github.com/outboxkit/outbox/providers/internal/doubleserver"
	"github.com/outboxkit/outbox/providers/internal/effects"
	"github.com/outboxkit/outbox/providers/internal/idemstore"
)

// DefaultAPIKey is the secret key a double accepts when Config.APIKey is
// empty. It is shaped like a Stripe test-mode secret key.
const DefaultAPIKey = "sk_test_double"

// KeyRetention is how long the double remembers an idempotency key after its
// first use, like Stripe's 24 hours.
const KeyRetention = 24 * time.Hour

// APIVersion is the Stripe-Version the double answers with when the request
// names none; it is the version stripe-go v76 pins.
const APIVersion = "2023-10-16"

// Built-in test payment methods that are declined without calling Decline,
// as in Stripe's test mode. They are declined only when the request confirms
// the PaymentIntent (confirm=true), because only confirmation charges.
const (
	// DeclinedCard is declined with decline_code generic_decline.
	DeclinedCard = "pm_card_visa_chargeDeclined"
	// InsufficientFundsCard is declined with decline_code insufficient_funds.
	InsufficientFundsCard = "pm_card_chargeDeclinedInsufficientFunds"
	// AuthenticationRequiredCard needs the customer to authenticate (3D
	// Secure), as Stripe's test card of that name: confirmed off session
	// (off_session=true) it is a 402 card_error with code and decline_code
	// authentication_required (the PaymentIntent is left in
	// requires_payment_method); confirmed on session, a 200 whose
	// PaymentIntent is requires_action.
	AuthenticationRequiredCard = "pm_card_authenticationRequired"
	// ProcessingPaymentMethod settles later, like a bank debit: confirmed,
	// its PaymentIntent is processing until Settle is called.
	ProcessingPaymentMethod = "pm_usBankAccount_processing"
)

// Auth failures SetAuthFailure can make every API request answer, as
// Stripe answers when the account's credentials are wrong.
const (
	// AuthOK answers normally.
	AuthOK AuthFailure = iota
	// AuthKeyExpired: 401 "Expired API Key provided", as after the key was
	// rolled.
	AuthKeyExpired
	// AuthKeyRestricted: 403, a restricted key without the permission the
	// endpoint needs.
	AuthKeyRestricted
)

// AuthFailure is a mode of SetAuthFailure.
type AuthFailure int

// Config configures a Server. The zero value is usable.
type Config struct {
	// APIKey is the secret key the double accepts as
	// "Authorization: Bearer <key>". Defaults to DefaultAPIKey.
	APIKey string
	// Now is the clock used for key expiry and PaymentIntents' created
	// time. Defaults to time.Now. Tests inject a clock to expire keys.
	Now func() time.Time
	// Faults injects faults into POST /v1/payment_intents, one drawn per
	// request. Defaults to an injector that injects nothing (fault.New(1)).
	Faults *fault.Injector
	// LookupFaults injects faults into the reads Reconcile makes (GET
	// /v1/payment_intents, its search, a PaymentIntent by id, GET
	// /v1/refunds), one drawn per request; see Server.LookupFaults.
	// Defaults to an injector that injects nothing.
	LookupFaults *fault.Injector
	// Addr is the address NewServer listens on. Defaults to "127.0.0.1:0"
	// (a free port on loopback).
	Addr string
	// SearchLag is how long after its creation (on Now) a PaymentIntent
	// becomes visible to search, as Stripe's search index lags behind
	// (usually under a minute, up to an hour in outages). Zero makes search
	// see everything at once. Listing is never delayed. SetSearchLag
	// changes it later.
	SearchLag time.Duration
}

// PaymentIntent is one PaymentIntent the double created: one charge attempt.
type PaymentIntent struct {
	// ID is Stripe-shaped: "pi_" followed by 24 alphanumerics.
	ID string
	// Amount and Currency are the request's amount and (lowercased) currency.
	Amount   int64
	Currency string
	// Customer, PaymentMethod, Description, ReceiptEmail and
	// StatementDescriptorSuffix are the request's parameters, or empty.
	Customer                  string
	PaymentMethod             string
	Description               string
	ReceiptEmail              string
	StatementDescriptorSuffix string
	// Confirm is the request's confirm parameter.
	Confirm bool
	// Status is "succeeded" when confirmed and charged, "requires_capture"
	// when confirmed with capture_method manual (until captured),
	// "requires_payment_method" when the card was declined (or when there is
	// no payment method), "requires_action" when the customer must
	// authenticate, "processing" for a payment method that settles later,
	// "requires_confirmation" when not confirmed.
	Status string
	// CaptureMethod is the request's capture_method, "automatic" when it
	// had none. AmountCapturable is what a capture may still take.
	CaptureMethod    string
	AmountCapturable int64
	// AmountReceived is what was captured: the amount when charged at
	// once, amount_to_capture after a manual capture.
	AmountReceived int64
	// AmountRefunded is the total of its refunds; never more than what
	// was received.
	AmountRefunded int64
	// CancellationReason and CanceledAt are set once it is canceled.
	CancellationReason string
	CanceledAt         time.Time
	// OffSession is the request's off_session; SetupFutureUsage and
	// ReturnURL its setup_future_usage and return_url, or empty.
	OffSession       bool
	SetupFutureUsage string
	ReturnURL        string
	// PaymentMethodTypes is the request's payment_method_types, or nil.
	PaymentMethodTypes []string
	// AutomaticPaymentMethods is whether the request sent
	// automatic_payment_methods[enabled]=true; AllowRedirects its
	// allow_redirects, or empty.
	AutomaticPaymentMethods bool
	AllowRedirects          string
	// DeclineCode is set when the payment was declined.
	DeclineCode string
	// Metadata is the request's metadata (never nil).
	Metadata map[string]string
	// Created is the creation time on Config.Now.
	Created time.Time
	// IdempotencyKey is the key of the request that created it, or empty.
	IdempotencyKey string
	// RequestID is the Request-Id of the request that created it.
	RequestID string
	// SearchableAt is when search starts to see it: Created plus the
	// search lag in force when it was created.
	SearchableAt time.Time
}

func (pi PaymentIntent) clone() PaymentIntent {
	md := make(map[string]string, len(pi.Metadata))
	for k, v := range pi.Metadata {
		md[k] = v
	}
	pi.Metadata = md
	pi.PaymentMethodTypes = slices.Clone(pi.PaymentMethodTypes)
	return pi
}

// Stats summarizes what a double did. It is also served as JSON at
// GET /_double/stats, for tests that run the dispatcher in another process.
type Stats struct {
	// PaymentIntents is how many PaymentIntents were created (effects),
	// declined ones included.
	PaymentIntents int `json:"payment_intents"`
	// Refunds is how many refunds were made.
	Refunds int `json:"refunds"`
	// Replays is how many responses were replayed from the idempotency store.
	Replays int `json:"replays"`
	// Requests is how many API requests (everything under /v1/) arrived,
	// whatever their answer.
	Requests int `json:"requests"`
	// ListRequests and SearchRequests count the requests to
	// GET /v1/payment_intents and GET /v1/payment_intents/search.
	ListRequests   int `json:"list_requests"`
	SearchRequests int `json:"search_requests"`
	// Faults counts the faults the double applied, by kind. A fault drawn for
	// a request that never reached the point where it applies (a 401, a 409,
	// an idempotency mismatch, a validation error, or an error fault drawn for
	// a replayed request) is not counted here, though the injector counts it.
	Faults map[fault.Kind]int `json:"faults"`
	// DuplicateEffects is how many intent ids have more than one PaymentIntent.
	DuplicateEffects int `json:"duplicate_effects"`
	// EffectsByIntent counts PaymentIntents and refunds per
	// metadata["intent_id"].
	EffectsByIntent map[string]int `json:"effects_by_intent"`
}

// Server is a running Stripe double. Create it with NewServer.
type Server struct {
	apiKey string
	now    func() time.Time
	faults *fault.Injector
	// lookupFaults are drawn by the reads Reconcile makes.
	lookupFaults *fault.Injector
	handler      http.Handler

	srv *doubleserver.Server

	effects effects.Tally

	mu            sync.Mutex
	pis           []*PaymentIntent
	refunds       []*Refund
	byID          map[string]*PaymentIntent
	keys          *idemstore.Store[savedResponse]
	declines      map[string]string
	actions       map[string]bool
	authFailure   AuthFailure
	requests      int
	lists         int
	searches      int
	searchLag     time.Duration
	replays       int
	faultsApplied map[fault.Kind]int
}

type savedResponse struct {
	status    int
	body      []byte
	requestID string
}

// NewServer starts a double listening on cfg.Addr and serving in a
// goroutine. Close it when done.
func NewServer(cfg Config) (*Server, error) {
	s := newServer(cfg)
	srv, err := doubleserver.Start("stripedouble", cfg.Addr, s.handler)
	if err != nil {
		return nil, err
	}
	s.srv = srv
	return s, nil
}

func newServer(cfg Config) *Server {
	s := &Server{
		apiKey:        cfg.APIKey,
		now:           cfg.Now,
		faults:        cfg.Faults,
		lookupFaults:  cfg.LookupFaults,
		searchLag:     cfg.SearchLag,
		byID:          map[string]*PaymentIntent{},
		keys:          idemstore.New[savedResponse](KeyRetention),
		declines:      map[string]string{DeclinedCard: "generic_decline", InsufficientFundsCard: "insufficient_funds"},
		actions:       map[string]bool{},
		faultsApplied: map[fault.Kind]int{},
	}
	if s.apiKey == "" {
		s.apiKey = DefaultAPIKey
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.faults == nil {
		s.faults = fault.New(1)
	}
	if s.lookupFaults == nil {
		s.lookupFaults = fault.New(1)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/payment_intents", s.handleCreate)
	mux.HandleFunc("GET /v1/payment_intents", s.handleList)
	mux.HandleFunc("GET /v1/payment_intents/search", s.handleSearch)
	mux.HandleFunc("GET /v1/payment_intents/{id}", s.handleGet)
	mux.HandleFunc("POST /v1/payment_intents/{id}/capture", s.handleCapture)
	mux.HandleFunc("POST /v1/payment_intents/{id}/cancel", s.handleCancel)
	mux.HandleFunc("POST /v1/refunds", s.handleRefundCreate)
	mux.HandleFunc("GET /v1/refunds", s.handleRefundList)
	mux.HandleFunc("GET /_double/stats", s.handleStats)
	mux.HandleFunc("/", s.handleUnknown)
	s.handler = mux
	return s
}

// URL is the double's base URL, "http://127.0.0.1:PORT", to give to
// stripe-go as BackendConfig.URL.
func (s *Server) URL() string { return s.srv.URL() }

// Close stops the server, dropping open connections (a request held by a
// Delay fault sees its context cancelled), and waits for it to stop serving.
func (s *Server) Close() error { return s.srv.Close() }

// Handler is the double's HTTP handler, to mount elsewhere if wanted.
//
// POST /v1/payment_intents (and likewise every capture, cancel and refund)
// draws one fault from Faults() after
// authentication and applies it:
//
//   - fault.RateLimit: 429 rate_limit with Retry-After; nothing created or
//     saved, whatever the key's state.
//   - fault.ErrorBefore with a status other than 500 (502, 503): that status
//     with an api_error, as a gateway would answer; nothing created or saved.
//   - fault.ErrorBefore with 500: nothing created, the 500 is saved under
//     the key (execution had started), so retries replay it.
//   - fault.ErrorAfter: the PaymentIntent is created, then the fault's
//     status is answered. A 500 is saved under the key and replayed; for any
//     other status the real (200 or 402) response is saved, so a retry
//     replays the success.
//   - fault.LoseResponse: the PaymentIntent is created and its response
//     saved, then the connection is dropped without an answer.
//   - fault.Delay: the PaymentIntent is created, then the answer is held
//     back for the delay while the key stays in flight (concurrent requests
//     with it get 409). If the client goes away meanwhile, the response is
//     still saved.
//
// A request whose key already has a saved response is replayed and never
// creates anything: Delay and LoseResponse still apply to the replay (they
// are network faults), ErrorBefore and ErrorAfter with 500 are ignored.
func (s *Server) Handler() http.Handler { return s.handler }

// Faults returns the injector the double draws faults from.
func (s *Server) Faults() *fault.Injector { return s.faults }

// LookupFaults returns the injector the double's reads draw faults from:
// ErrorBefore (and ErrorAfter: a read has no effect) answers its Status as
// Stripe words it (400 and 404 resource_missing, as for an object of
// another account or mode; 401 an invalid key; 403 a restricted key; 5xx
// api_error), RateLimit a 429 with Retry-After when its RetryAfter is set
// and without one (Stripe-Should-Retry: false) when it is not, and
// LoseResponse and Delay as for writes.
func (s *Server) LookupFaults() *fault.Injector { return s.lookupFaults }

// lookupFault applies the next look-up fault to a read; it reports whether
// it answered the request.
func (s *Server) lookupFault(w http.ResponseWriter, r *http.Request, reqID string) bool {
	f := s.lookupFaults.Next()
	switch f.Kind {
	case fault.None:
		return false
	case fault.Delay:
		select {
		case <-time.After(f.Delay):
		case <-r.Context().Done():
		}
		return false
	case fault.LoseResponse:
		fault.DropConnection(w)
		return true
	case fault.RateLimit:
		if f.RetryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(int((f.RetryAfter+time.Second-1)/time.Second)))
		} else {
			w.Header().Set("Stripe-Should-Retry", "false")
		}
		s.writeError(w, r, reqID, http.StatusTooManyRequests, apiError{Type: "invalid_request_error", Code: "rate_limit",
			Message: "Too many requests hit the API too quickly. We recommend an exponential backoff of your requests."})
		return true
	}
	status := f.StatusOr500()
	e := apiError{Type: "invalid_request_error", Message: http.StatusText(status)}
	switch {
	case status == http.StatusBadRequest || status == http.StatusNotFound:
		e.Code, e.Param = "resource_missing", "id"
		e.Message = "No such payment_intent: the object exists in another account or mode (a live key reading a test object, say)"
	case status == http.StatusUnauthorized:
		e.Message = "Invalid API Key provided"
	case status == http.StatusForbidden:
		e.Message = "The provided key does not have the required permissions for this endpoint."
	case status >= 500:
		e.Type, e.Message = "api_error", "An unknown error occurred"
	}
	s.writeError(w, r, reqID, status, e)
	return true
}

// Decline makes every confirmed payment with paymentMethod a 402 card_error
// with code card_declined and the given decline code. The PaymentIntent is
// still created (status requires_payment_method), as Stripe does, and counts
// as an effect. DeclinedCard and InsufficientFundsCard are declined without
// calling it.
func (s *Server) Decline(paymentMethod, declineCode string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.declines[paymentMethod] = declineCode
}

// RequireAction makes every confirmed payment with paymentMethod answer
// 200 with a PaymentIntent in requires_action, on session or off (as Stripe
// does when, say, a Radar rule asks for 3D Secure and the request does not
// fail on it). AuthenticationRequiredCard behaves so only on session.
func (s *Server) RequireAction(paymentMethod string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.actions[paymentMethod] = true
}

// Settle ends a processing PaymentIntent: succeeded when ok, else back to
// requires_payment_method with a last_payment_error, as a failed bank debit
// does. It reports whether id was processing.
func (s *Server) Settle(id string, ok bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	pi, found := s.byID[id]
	if !found || pi.Status != "processing" {
		return false
	}
	if ok {
		pi.Status = "succeeded"
		if pi.CaptureMethod == "manual" {
			pi.Status = "requires_capture"
			pi.AmountCapturable = pi.Amount
		}
	} else {
		pi.Status = "requires_payment_method"
		pi.DeclineCode = "insufficient_funds"
	}
	return true
}

// SetAuthFailure makes every API request (from now on, until AuthOK) fail
// authentication the way Stripe does when the key was rolled or lacks a
// permission. Nothing is created, saved or counted as an effect.
func (s *Server) SetAuthFailure(f AuthFailure) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.authFailure = f
}

// SetSearchLag sets the search lag (see Config.SearchLag) for
// PaymentIntents created from now on.
func (s *Server) SetSearchLag(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.searchLag = d
}

// PaymentIntents returns a copy of every PaymentIntent created, in order.
func (s *Server) PaymentIntents() []PaymentIntent {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]PaymentIntent, len(s.pis))
	for i, pi := range s.pis {
		out[i] = pi.clone()
	}
	return out
}

// EffectsFor counts the PaymentIntents (charge attempts, declined ones
// included) and refunds whose metadata["intent_id"] is intentID.
func (s *Server) EffectsFor(intentID int64) int { return s.effects.For(intentID) }

// DuplicateEffects counts the intent ids that have more than one
// PaymentIntent: for an exactly-once test, it must be 0.
func (s *Server) DuplicateEffects() int { return s.effects.Duplicates() }

// Stats returns a snapshot of the double's counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	faults := make(map[fault.Kind]int, len(s.faultsApplied))
	for k, v := range s.faultsApplied {
		faults[k] = v
	}
	return Stats{
		PaymentIntents:   len(s.pis),
		Refunds:          len(s.refunds),
		Replays:          s.replays,
		Requests:         s.requests,
		ListRequests:     s.lists,
		SearchRequests:   s.searches,
		Faults:           faults,
		DuplicateEffects: s.effects.Duplicates(),
		EffectsByIntent:  s.effects.Snapshot(),
	}
}

// ---- HTTP plumbing ----

// apiError is Stripe's error object, as stripe-go decodes it.
type apiError struct {
	Type          string         `json:"type"`
	Code          string         `json:"code,omitempty"`
	DeclineCode   string         `json:"decline_code,omitempty"`
	Message       string         `json:"message"`
	Param         string         `json:"param,omitempty"`
	DocURL        string         `json:"doc_url,omitempty"`
	Charge        string         `json:"charge,omitempty"`
	PaymentIntent map[string]any `json:"payment_intent,omitempty"`
	RequestLogURL string         `json:"request_log_url,omitempty"`
}

func errorBody(e apiError) []byte {
	b, _ := json.Marshal(map[string]apiError{"error": e})
	return b
}

const msgServerError = "Sorry, something went wrong. We've already been notified of the problem, but if you need any help, you can reach out to support: https://support.stripe.com/contact"

func serverErrorBody(status int) []byte {
	msg := msgServerError
	if status != http.StatusInternalServerError {
		msg = fmt.Sprintf("The Stripe API is temporarily unavailable (HTTP %d). Please retry the request with the same idempotency key.", status)
	}
	return errorBody(apiError{Type: "api_error", Message: msg})
}

func (s *Server) write(w http.ResponseWriter, r *http.Request, reqID string, status int, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Request-Id", reqID)
	if k := r.Header.Get("Idempotency-Key"); k != "" {
		h.Set("Idempotency-Key", k)
	}
	if v := r.Header.Get("Stripe-Version"); v != "" {
		h.Set("Stripe-Version", v)
	} else {
		h.Set("Stripe-Version", APIVersion)
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func (s *Server) writeError(w http.ResponseWriter, r *http.Request, reqID string, status int, e apiError) {
	if e.RequestLogURL == "" && e.Type != "" {
		e.RequestLogURL = "https://dashboard.stripe.com/test/logs/" + reqID
	}
	s.write(w, r, reqID, status, errorBody(e))
}

func (s *Server) countRequest() {
	s.mu.Lock()
	s.requests++
	s.mu.Unlock()
}

func (s *Server) countFault(k fault.Kind) {
	s.mu.Lock()
	s.faultsApplied[k]++
	s.mu.Unlock()
}

// authorize checks the bearer key and answers 401 when it is wrong.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request, reqID string) bool {
	auth := r.Header.Get("Authorization")
	key, ok := strings.CutPrefix(auth, "Bearer ")
	key = strings.TrimSpace(key)
	s.mu.Lock()
	failure := s.authFailure
	s.mu.Unlock()
	if ok && key == s.apiKey {
		switch failure {
		case AuthKeyExpired:
			s.writeError(w, r, reqID, http.StatusUnauthorized, apiError{
				Type:    "invalid_request_error",
				Code:    "api_key_expired",
				Message: "Expired API Key provided: " + maskKey(key),
				DocURL:  "https://stripe.com/docs/error-codes/api-key-expired",
			})
			return false
		case AuthKeyRestricted:
			s.writeError(w, r, reqID, http.StatusForbidden, apiError{
				Type:    "invalid_request_error",
				Message: "The provided key '" + maskKey(key) + "' does not have the required permissions for this endpoint on account 'acct_double'. Having the 'rak_payment_intent_write' permission would allow this request to continue.",
			})
			return false
		}
		return true
	}
	w.Header().Set("Www-Authenticate", `Bearer realm="Stripe"`)
	if !ok || key == "" {
		s.writeError(w, r, reqID, http.StatusUnauthorized, apiError{
			Type:    "invalid_request_error",
			Message: "You did not provide an API key. You need to provide your API key in the Authorization header, using Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY'). See https://stripe.com/docs/api#authentication for details, or we can help at https://support.stripe.com/.",
		})
		return false
	}
	s.writeError(w, r, reqID, http.StatusUnauthorized, apiError{
		Type:    "invalid_request_error",
		Message: "Invalid API Key provided: " + maskKey(key),
	})
	return false
}

// maskKey masks an API key the way Stripe's error messages do: the prefix
// ("sk_test_") and, for keys long enough, the last four characters stay
// visible; everything else becomes '*'. The result never equals the key.
func maskKey(key string) string {
	prefix := ""
	for _, p := range []string{"sk_test_", "sk_live_", "rk_test_", "rk_live_", "pk_test_", "pk_live_"} {
		if strings.HasPrefix(key, p) {
			prefix = p
			break
		}
	}
	rest := key[len(prefix):]
	if len(rest) >= 12 {
		return prefix + strings.Repeat("*", len(rest)-4) + rest[len(rest)-4:]
	}
	return prefix + strings.Repeat("*", max(len(rest), 4))
}

func (s *Server) handleUnknown(w http.ResponseWriter, r *http.Request) {
	reqID := newID("req_", 14)
	if strings.HasPrefix(r.URL.Path, "/v1/") {
		s.countRequest()
	}
	s.writeError(w, r, reqID, http.StatusNotFound, apiError{
		Type:    "invalid_request_error",
		Message: fmt.Sprintf("Unrecognized request URL (%s: %s). Please see https://stripe.com/docs or we can help at https://support.stripe.com/.", r.Method, r.URL.Path),
	})
}

func (s *Server) handleStats(w http.ResponseWriter, r *http.Request) {
	b, _ := json.Marshal(s.Stats())
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

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
	p := createParams{metadata: map[string]string{}}
	keys := make([]string, 0, len(form))
	for k := range form {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := form[k][len(form[k])-1]
		if mk, ok := strings.CutPrefix(k, "metadata["); ok && strings.HasSuffix(mk, "]") {
			mk = strings.TrimSuffix(mk, "]")
			switch {
			case mk == "" || strings.ContainsAny(mk, "[]"):
				return p, invalid(k, "parameter_unknown", "Invalid metadata key: "+mk)
			case len(mk) > 40:
				return p, invalid(k, "", "Metadata keys can be at most 40 characters long. Invalid key: "+mk)
			case len(v) > 500:
				return p, invalid(k, "", "Metadata values can have up to 500 characters, but you passed in a value that is "+strconv.Itoa(len(v))+" characters. Invalid value: "+v[:20]+"...")
			}
			p.metadata[mk] = v
			continue
		}
		if knownParams[k] {
			continue
		}
		if slices.ContainsFunc(knownPrefixes, func(pre string) bool { return strings.HasPrefix(k, pre) }) {
			continue
		}
		return p, invalid(k, "parameter_unknown", "Received unknown parameter: "+k)
	}
	if len(p.metadata) > 50 {
		return p, invalid("metadata", "", "Metadata can have up to 50 keys, but you passed in "+strconv.Itoa(len(p.metadata))+" keys.")
	}
	get := func(k string) (string, bool) {
		vs, ok := form[k]
		if !ok || len(vs) == 0 {
			return "", false
		}
		return vs[len(vs)-1], true
	}
	amount, ok := get("amount")
	if !ok || amount == "" {
		return p, invalid("amount", "parameter_missing", "Missing required param: amount.")
	}
	n, err := strconv.ParseInt(amount, 10, 64)
	if err != nil {
		return p, invalid("amount", "parameter_invalid_integer", "Invalid integer: "+amount)
	}
	if n < 1 {
		return p, invalid("amount", "parameter_invalid_integer", "This value must be greater than or equal to 1.")
	}
	if n > 99999999 {
		return p, invalid("amount", "amount_too_large", "Amount must be no more than $999,999.99")
	}
	p.amount = n
	currency, ok := get("currency")
	if !ok || currency == "" {
		return p, invalid("currency", "parameter_missing", "Missing required param: currency.")
	}
	if !currencyRE.MatchString(strings.ToLower(currency)) {
		return p, invalid("currency", "", "Invalid currency: "+currency+". Stripe currently supports these currencies: usd, eur, gbp, ...")
	}
	p.currency = strings.ToLower(currency)
	if c, ok := get("confirm"); ok {
		switch c {
		case "true":
			p.confirm = true
		case "false":
		default:
			return p, invalid("confirm", "parameter_invalid_boolean", "Invalid boolean: "+c)
		}
	}
	p.customer, _ = get("customer")
	if p.customer != "" && !strings.HasPrefix(p.customer, "cus_") {
		return p, invalid("customer", "resource_missing", "No such customer: '"+p.customer+"'")
	}
	p.paymentMethod, _ = get("payment_method")
	p.description, _ = get("description")
	p.receiptEmail, _ = get("receipt_email")
	p.statementDescriptorSuffix, _ = get("statement_descriptor_suffix")
	if len(p.statementDescriptorSuffix) > 22 {
		return p, invalid("statement_descriptor_suffix", "", "The statement descriptor suffix must be at most 22 characters.")
	}
	if p.statementDescriptorSuffix != "" && strings.IndexFunc(p.statementDescriptorSuffix, unicode.IsLetter) < 0 {
		return p, invalid("statement_descriptor_suffix", "", "The statement descriptor suffix must contain at least one letter.")
	}
	if threeDecimal[p.currency] && p.amount%10 != 0 {
		return p, invalid("amount", "invalid_amount", "For "+strings.ToUpper(p.currency)+", the amount must be a multiple of 10: Stripe charges three-decimal currencies in whole hundredths.")
	}
	if minimum, ok := minimumAmounts[p.currency]; ok && p.amount < minimum {
		return p, invalid("amount", "amount_too_small", fmt.Sprintf("Amount must be at least %d %s.", minimum, p.currency))
	}
	if err := parseCharge(form, get, &p); err != nil {
		return p, err
	}
	return p, nil
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
func parseCharge(form map[string][]string, get func(string) (string, bool), p *createParams) *apiError {
	boolean := func(k string) (bool, bool, *apiError) {
		v, ok := get(k)
		if !ok {
			return false, false, nil
		}
		switch v {
		case "true":
			return true, true, nil
		case "false":
			return false, true, nil
		}
		return false, true, invalid(k, "parameter_invalid_boolean", "Invalid boolean: "+v)
	}
	p.captureMethod, _ = get("capture_method")
	switch p.captureMethod {
	case "", "automatic", "automatic_async", "manual":
	default:
		return invalid("capture_method", "", "Invalid capture_method: must be one of automatic, automatic_async, or manual")
	}
	if p.captureMethod == "" {
		p.captureMethod = "automatic"
	}
	p.setupFutureUsage, _ = get("setup_future_usage")
	switch p.setupFutureUsage {
	case "", "on_session", "off_session":
	default:
		return invalid("setup_future_usage", "", "Invalid setup_future_usage: must be one of on_session or off_session")
	}
	off, offGiven, err := boolean("off_session")
	if err != nil {
		return err
	}
	p.offSession = off
	apmEnabled, apmGiven, err := boolean("automatic_payment_methods[enabled]")
	if err != nil {
		return err
	}
	p.automaticPaymentMethods = apmEnabled
	p.allowRedirects, _ = get("automatic_payment_methods[allow_redirects]")
	switch p.allowRedirects {
	case "", "always", "never":
	default:
		return invalid("automatic_payment_methods[allow_redirects]", "", "Invalid automatic_payment_methods[allow_redirects]: must be one of always or never")
	}
	if p.allowRedirects != "" && !apmGiven {
		return invalid("automatic_payment_methods[enabled]", "parameter_missing", "Missing required param: automatic_payment_methods[enabled].")
	}
	for k := range form {
		if strings.HasPrefix(k, "payment_method_types[") {
			p.paymentMethodTypes = append(p.paymentMethodTypes, k)
		}
	}
	if len(p.paymentMethodTypes) > 0 {
		slices.Sort(p.paymentMethodTypes) // payment_method_types[0], [1], ...
		keys := p.paymentMethodTypes
		p.paymentMethodTypes = nil
		for _, k := range keys {
			v, _ := get(k)
			p.paymentMethodTypes = append(p.paymentMethodTypes, v)
		}
	}
	if apmGiven && len(p.paymentMethodTypes) > 0 {
		return invalid("automatic_payment_methods", "", "You may only specify one of these parameters: automatic_payment_methods, payment_method_types.")
	}
	p.returnURL, _ = get("return_url")
	switch {
	case offGiven && !p.confirm:
		return invalid("off_session", "", "You can only use `off_session` when `confirm=true`.")
	case p.returnURL != "" && !p.confirm:
		return invalid("return_url", "", "You can only use `return_url` when `confirm=true`.")
	case p.confirm && p.paymentMethod == "":
		return invalid("payment_method", "payment_intent_unexpected_state", "You cannot confirm this PaymentIntent because it's missing a payment method. To confirm the PaymentIntent with "+
			"a customer, you must provide a payment method.")
	case p.confirm && p.returnURL == "" && len(p.paymentMethodTypes) == 0 && (!apmGiven || (apmEnabled && p.allowRedirects != "never")):
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

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// wire renders the PaymentIntent as Stripe's JSON object.
func (pi *PaymentIntent) wire() map[string]any {
	md := make(map[string]string, len(pi.Metadata))
	for k, v := range pi.Metadata {
		md[k] = v
	}
	m := map[string]any{
		"id":                          pi.ID,
		"object":                      "payment_intent",
		"amount":                      pi.Amount,
		"amount_capturable":           pi.AmountCapturable,
		"amount_received":             0,
		"capture_method":              pi.CaptureMethod,
		"client_secret":               pi.ID + "_secret_" + strings.Repeat("x", 25),
		"confirmation_method":         "automatic",
		"created":                     pi.Created.Unix(),
		"currency":                    pi.Currency,
		"customer":                    nullable(pi.Customer),
		"description":                 nullable(pi.Description),
		"last_payment_error":          nil,
		"latest_charge":               nil,
		"livemode":                    false,
		"metadata":                    md,
		"payment_method":              nullable(pi.PaymentMethod),
		"payment_method_types":        []string{"card"},
		"receipt_email":               nullable(pi.ReceiptEmail),
		"statement_descriptor_suffix": nullable(pi.StatementDescriptorSuffix),
		"status":                      pi.Status,
	}
	if pi.CaptureMethod == "" {
		m["capture_method"] = "automatic"
	}
	if pi.PaymentMethodTypes != nil {
		m["payment_method_types"] = pi.PaymentMethodTypes
	}
	if pi.AutomaticPaymentMethods {
		apm := map[string]any{"enabled": true}
		if pi.AllowRedirects != "" {
			apm["allow_redirects"] = pi.AllowRedirects
		}
		m["automatic_payment_methods"] = apm
	}
	m["setup_future_usage"] = nullable(pi.SetupFutureUsage)
	m["cancellation_reason"] = nullable(pi.CancellationReason)
	m["canceled_at"] = nil
	if !pi.CanceledAt.IsZero() {
		m["canceled_at"] = pi.CanceledAt.Unix()
	}
	switch pi.Status {
	case "succeeded":
		m["amount_received"] = pi.Amount
		if pi.AmountReceived != 0 {
			m["amount_received"] = pi.AmountReceived
		}
		m["latest_charge"] = chargeID(pi.ID)
	case "requires_capture", "processing":
		m["latest_charge"] = chargeID(pi.ID)
	case "requires_action":
		m["next_action"] = map[string]any{"type": "use_stripe_sdk", "use_stripe_sdk": map[string]any{"type": "three_d_secure_redirect"}}
	}
	if pi.DeclineCode != "" {
		m["latest_charge"] = chargeID(pi.ID)
		m["payment_method"] = nil
		code := "card_declined"
		if pi.DeclineCode == "authentication_required" {
			code = "authentication_required"
		}
		m["last_payment_error"] = map[string]any{
			"type":         "card_error",
			"code":         code,
			"decline_code": pi.DeclineCode,
			"message":      declineMessage(pi.DeclineCode),
			"charge":       chargeID(pi.ID),
		}
	}
	return m
}

// ---- GET /v1/payment_intents/{id} ----

func (s *Server) handleGet(w http.ResponseWriter, r *http.Request) {
	s.countRequest()
	reqID := newID("req_", 14)
	if !s.authorize(w, r, reqID) {
		return
	}
	if s.lookupFault(w, r, reqID) {
		return
	}
	id := r.PathValue("id")
	s.mu.Lock()
	pi, ok := s.byID[id]
	var wire map[string]any
	if ok {
		wire = pi.wire()
	}
	s.mu.Unlock()
	if !ok {
		s.writeError(w, r, reqID, http.StatusNotFound, apiError{
			Type:    "invalid_request_error",
			Code:    "resource_missing",
			Param:   "intent",
			Message: "No such payment_intent: '" + id + "'",
			DocURL:  "https://stripe.com/docs/error-codes/resource-missing",
		})
		return
	}
	body, _ := json.Marshal(wire)
	s.write(w, r, reqID, http.StatusOK, body)
}

// ---- GET /v1/payment_intents/search ----

// clauseRE matches one clause of the supported subset of Stripe's search
// query language: metadata['key']:'value' (either quote), or
// status/customer/currency:'value'.
var clauseRE = regexp.MustCompile(`^(?:metadata\[(?:'([^']*)'|"([^"]*)")\]|(status|customer|currency))\s*:\s*(?:'([^']*)'|"([^"]*)")$`)

var andRE = regexp.MustCompile(`\s+AND\s+`)

type clause struct {
	field, metaKey, value string
}

func parseQuery(q string) ([]clause, bool) {
	q = strings.TrimSpace(q)
	if q == "" {
		return nil, false
	}
	var out []clause
	for _, part := range andRE.Split(q, -1) {
		m := clauseRE.FindStringSubmatch(strings.TrimSpace(part))
		if m == nil {
			return nil, false
		}
		c := clause{field: m[3], value: m[4] + m[5]}
		if c.field == "" {
			c.field = "metadata"
			c.metaKey = m[1] + m[2]
		}
		out = append(out, c)
	}
	return out, true
}

func (c clause) match(pi *PaymentIntent) bool {
	switch c.field {
	case "metadata":
		v, ok := pi.Metadata[c.metaKey]
		return ok && v == c.value
	case "status":
		return pi.Status == c.value
	case "customer":
		return pi.Customer == c.value
	case "currency":
		return pi.Currency == c.value
	}
	return false
}

func (s *Server) handleSearch(w http.ResponseWriter, r *http.Request) {
	s.countRequest()
	s.mu.Lock()
	s.searches++
	s.mu.Unlock()
	reqID := newID("req_", 14)
	if !s.authorize(w, r, reqID) {
		return
	}
	if s.lookupFault(w, r, reqID) {
		return
	}
	q := r.URL.Query()
	clauses, ok := parseQuery(q.Get("query"))
	if !ok {
		s.writeError(w, r, reqID, http.StatusBadRequest, apiError{
			Type:    "invalid_request_error",
			Param:   "query",
			Message: "The search query is not supported by this test double: " + strconv.Quote(q.Get("query")) + ". Supported: metadata['key']:'value', status:'...', customer:'...', currency:'...', joined with AND.",
		})
		return
	}
	limit := 10
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 100 {
			s.writeError(w, r, reqID, http.StatusBadRequest, apiError{Type: "invalid_request_error", Param: "limit", Message: "This value must be between 1 and 100."})
			return
		}
		limit = n
	}
	offset := 0
	if pg := q.Get("page"); pg != "" {
		n, err := strconv.Atoi(strings.TrimPrefix(pg, "page_"))
		if err != nil || n < 0 || !strings.HasPrefix(pg, "page_") {
			s.writeError(w, r, reqID, http.StatusBadRequest, apiError{Type: "invalid_request_error", Param: "page", Message: "Invalid page: " + pg})
			return
		}
		offset = n
	}
	s.mu.Lock()
	now := s.now()
	var hits []map[string]any
	for _, pi := range newestFirst(s.pis) { // as Stripe orders search results
		if now.Before(pi.SearchableAt) {
			continue // not indexed yet: search is eventually consistent
		}
		all := true
		for _, c := range clauses {
			if !c.match(pi) {
				all = false
				break
			}
		}
		if all {
			hits = append(hits, pi.wire())
		}
	}
	s.mu.Unlock()
	total := len(hits)
	hits = hits[min(offset, total):min(offset+limit, total)]
	if hits == nil {
		hits = []map[string]any{}
	}
	var next any
	hasMore := offset+limit < total
	if hasMore {
		next = "page_" + strconv.Itoa(offset+limit)
	}
	body, _ := json.Marshal(map[string]any{
		"object":    "search_result",
		"data":      hits,
		"has_more":  hasMore,
		"next_page": next,
		"url":       "/v1/payment_intents/search",
	})
	s.write(w, r, reqID, http.StatusOK, body)
}

// ---- ids ----

const alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

func newID(prefix string, n int) string {
	b := make([]byte, n)
	size := big.NewInt(int64(len(alphabet)))
	for i := range b {
		v, err := rand.Int(rand.Reader, size)
		if err != nil {
			panic(errors.Join(errors.New("stripedouble: no randomness"), err))
		}
		b[i] = alphabet[v.Int64()]
	}
	return prefix + string(b)
}
