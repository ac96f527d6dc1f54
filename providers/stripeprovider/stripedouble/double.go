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
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

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
