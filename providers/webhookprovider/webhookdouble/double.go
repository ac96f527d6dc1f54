// Package webhookdouble is a local webhook receiver for testing the webhook
// provider: it verifies each delivery's X-Outbox-Signature (401 when it is
// missing, wrong or stale), records every delivery it acts on, and, when
// Config.IdempotencyHeader is set, honours that header the way a careful
// receiver does:
//
//   - a repeated key is answered with the first saved response and
//     "Idempotent-Replayed: true", without acting again;
//   - a repeated key while its first request is still being handled is a
//     409;
//   - keys are never forgotten (the double has no key window).
//
// Without an IdempotencyHeader it keeps no idempotency: two identical
// deliveries are two effects.
//
// Faults from package fault are applied to each signed, well-formed POST,
// after the signature check (see Server.Handler). The double counts the
// effects per intent id (the X-Outbox-Intent-Id header): that count, not the
// dispatcher's bookkeeping, is what exactly-once tests assert on.
//
// Everything is safe for concurrent use.
package webhookdouble

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/outboxkit/outbox/providers/fault"
	"github.com/outboxkit/outbox/providers/internal/doubleserver"
	"github.com/outboxkit/outbox/providers/internal/effects"
	"github.com/outboxkit/outbox/providers/internal/idemstore"
	"github.com/outboxkit/outbox/providers/webhookprovider"
)

// DefaultSecret is the signing secret the double accepts when Config.Secret
// is empty.
const DefaultSecret = "whsec_double_0123456789abcdef0123456789"

// RejectedEvent is an event the double always refuses with 422 and the
// message "event test.rejected is not accepted by this receiver", without
// acting: use it to provoke a permanent refusal of a valid payload.
const RejectedEvent = "test.rejected"

// MaxBodyBytes: a body larger than this is refused with 413.
const MaxBodyBytes = 1 << 20

// Config configures a Server. The zero value is usable.
type Config struct {
	// Secret is the HMAC key deliveries must be signed with. Defaults to
	// DefaultSecret.
	Secret string
	// IdempotencyHeader, when set ("Idempotency-Key"), makes the double
	// require that header on every delivery and honour it (see the package
	// doc). Empty, the default, means no idempotency.
	IdempotencyHeader string
	// Faults decides the fault applied to each delivery. Defaults to an
	// injector that injects nothing until faults are pushed or rates set
	// (fault.New(1)).
	Faults *fault.Injector
	// Now is the clock signatures are checked against and deliveries are
	// stamped with. Defaults to time.Now.
	Now func() time.Time
	// Tolerance is how far a signature's timestamp may be from Now.
	// Defaults to webhookprovider.DefaultTolerance.
	Tolerance time.Duration
	// Addr is the address NewServer listens on. Defaults to "127.0.0.1:0".
	Addr string
}

// Delivery is one delivery the double acted on.
type Delivery struct {
	// Ref is the double's id for it ("dlv_..."), answered in X-Request-Id.
	Ref string
	// Path is the request's URL path.
	Path string
	// IntentID is the X-Outbox-Intent-Id header.
	IntentID string
	// Namespace is the X-Outbox-Namespace header, or empty.
	Namespace string
	// IdempotencyKey is the Config.IdempotencyHeader's value, or empty.
	IdempotencyKey string
	// ID, Event, Data and CreatedAt are the body's fields.
	ID        string
	Event     string
	Data      json.RawMessage
	CreatedAt string
	// ReceivedAt is when the double acted (Config.Now).
	ReceivedAt time.Time
}

// Stats summarises what the double did.
type Stats struct {
	// Requests is how many requests arrived, whatever their answer.
	Requests int
	// Deliveries is how many deliveries were acted on (effects).
	Deliveries int
	// Replays is how many answers came from the idempotency store.
	Replays int
	// Unauthorized is how many requests were refused for their signature.
	Unauthorized int
	// Faults counts the faults applied, by kind.
	Faults map[fault.Kind]int
}

// Server is a running webhook receiver double. Create it with NewServer.
type Server struct {
	secret    string
	keyHeader string
	faults    *fault.Injector
	now       func() time.Time
	tolerance time.Duration
	handler   http.Handler

	srv *doubleserver.Server

	effects effects.Tally

	mu           sync.Mutex
	deliveries   []Delivery
	keys         *idemstore.Store[saved]
	requests     int
	replays      int
	unauthorized int
	applied      map[fault.Kind]int
}

type saved struct {
	status int
	ref    string
	body   []byte
}

// NewServer starts a double listening on cfg.Addr and serving in a
// goroutine. Close it when done.
func NewServer(cfg Config) (*Server, error) {
	s := &Server{
		secret:    cfg.Secret,
		keyHeader: cfg.IdempotencyHeader,
		faults:    cfg.Faults,
		now:       cfg.Now,
		tolerance: cfg.Tolerance,
		keys:      idemstore.New[saved](0),
		applied:   map[fault.Kind]int{},
	}
	if s.secret == "" {
		s.secret = DefaultSecret
	}
	if s.faults == nil {
		s.faults = fault.New(1)
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.tolerance <= 0 {
		s.tolerance = webhookprovider.DefaultTolerance
	}
	s.handler = http.HandlerFunc(s.handle)
	srv, err := doubleserver.Start("webhookdouble", cfg.Addr, s.handler)
	if err != nil {
		return nil, err
	}
	s.srv = srv
	return s, nil
}

// URL is the double's base URL, "http://127.0.0.1:PORT". It accepts POSTs
// on every path, so endpoints can be URL()+"/anything".
func (s *Server) URL() string { return s.srv.URL() }

// Close stops the server, dropping open connections, and waits for it to
// stop serving.
func (s *Server) Close() error { return s.srv.Close() }

// Faults returns the injector the double draws faults from.
func (s *Server) Faults() *fault.Injector { return s.faults }

// EffectsFor counts the deliveries acted on for intentID.
func (s *Server) EffectsFor(intentID int64) int { return s.effects.For(intentID) }

// DuplicateEffects counts the intent ids with more than one delivery acted
// on: for an exactly-once test, it must be 0.
func (s *Server) DuplicateEffects() int { return s.effects.Duplicates() }

// Deliveries returns a copy of every delivery acted on, in order.
func (s *Server) Deliveries() []Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Delivery, len(s.deliveries))
	for i, d := range s.deliveries {
		d.Data = append(json.RawMessage(nil), d.Data...)
		out[i] = d
	}
	return out
}

// Stats returns a snapshot of the double's counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	faults := make(map[fault.Kind]int, len(s.applied))
	for k, v := range s.applied {
		faults[k] = v
	}
	return Stats{Requests: s.requests, Deliveries: len(s.deliveries), Replays: s.replays, Unauthorized: s.unauthorized, Faults: faults}
}

// Handler is the double's HTTP handler, to mount elsewhere if wanted.
//
// Every POST is checked in this order: body size (413), signature (401, not
// counted as a fault), body shape (400 unless it is a JSON object with id,
// event and data), the idempotency header when configured (400 when missing,
// 409 while the key is in flight, the saved answer when it has one), then
// one fault is drawn and applied:
//
//   - fault.RateLimit: 429 with Retry-After; nothing done or saved.
//   - fault.ErrorBefore: the fault's status (500 by default) without
//     acting; nothing saved, so a retry with the key acts.
//   - fault.ErrorAfter: the delivery is acted on, then the fault's status is
//     answered. A 500 is saved under the key and replayed to every retry (a
//     receiver that saves whatever it answered); for any other status the
//     success is saved, so a retry is answered 200, replayed.
//   - fault.LoseResponse: acted on and saved, then the connection is
//     dropped without an answer.
//   - fault.Delay: acted on, then the answer is held back for the delay
//     while the key stays in flight.
//
// A replayed answer never acts: Delay and LoseResponse still apply to it
// (they are network faults); the other faults are ignored. RejectedEvent is
// refused with 422 after the fault draw, and not saved.
func (s *Server) Handler() http.Handler { return s.handler }

type message struct {
	Message string `json:"message"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func (s *Server) count(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f()
}

// handle serves every request, in the order Handler's doc gives.
func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	s.count(func() { s.requests++ })
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeJSON(w, http.StatusMethodNotAllowed, message{"only POST is accepted"})
		return
	}
	body, ok := s.readSignedBody(w, r)
	if !ok {
		return
	}
	d, ok := decodeDelivery(w, r, body)
	if !ok {
		return
	}
	claim, ok := s.claimKey(w, r, &d)
	if !ok {
		return
	}
	f := s.faults.Next()
	if s.refuseWithoutActing(w, f, d, claim) {
		return
	}
	s.actAndAnswer(w, r, f, &d, claim)
}

// readSignedBody reads the body and verifies its signature, answering 400,
// 413 or 401 itself when it goes no further.
func (s *Server) readSignedBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxBodyBytes+1))
	if err != nil {
		writeJSON(w, http.StatusBadRequest, message{"cannot read the body"})
		return nil, false
	}
	if len(body) > MaxBodyBytes {
		writeJSON(w, http.StatusRequestEntityTooLarge, message{fmt.Sprintf("the body is larger than %d bytes", MaxBodyBytes)})
		return nil, false
	}
	if err := webhookprovider.VerifyAt(s.secret, r.Header.Get(webhookprovider.SignatureHeader), body, s.tolerance, s.now()); err != nil {
		s.count(func() { s.unauthorized++ })
		writeJSON(w, http.StatusUnauthorized, message{err.Error()})
		return nil, false
	}
	return body, true
}

// decodeDelivery reads the delivery from the request's envelope and
// headers, answering 400 itself when the body is not an envelope.
func decodeDelivery(w http.ResponseWriter, r *http.Request, body []byte) (Delivery, bool) {
	var env struct {
		ID        string          `json:"id"`
		Event     string          `json:"event"`
		Data      json.RawMessage `json:"data"`
		CreatedAt string          `json:"created_at"`
	}
	if err := json.Unmarshal(body, &env); err != nil || env.ID == "" || env.Event == "" || len(env.Data) == 0 {
		writeJSON(w, http.StatusBadRequest, message{"the body must be a JSON object with id, event and data"})
		return Delivery{}, false
	}
	return Delivery{
		Path:      r.URL.Path,
		IntentID:  r.Header.Get(webhookprovider.IntentIDHeader),
		Namespace: r.Header.Get(webhookprovider.NamespaceHeader),
		ID:        env.ID,
		Event:     env.Event,
		Data:      env.Data,
		CreatedAt: env.CreatedAt,
	}, true
}

// claimKey claims the delivery's idempotency key when the double honours
// one, and sets d.IdempotencyKey. It answers the request itself when it
// goes no further: 400 without a key, 409 while the key is in flight, the
// saved answer replayed. Without an IdempotencyHeader the claim is nil,
// which Release and Finish ignore.
func (s *Server) claimKey(w http.ResponseWriter, r *http.Request, d *Delivery) (*idemstore.Claim[saved], bool) {
	if s.keyHeader == "" {
		return nil, true
	}
	d.IdempotencyKey = r.Header.Get(s.keyHeader)
	if d.IdempotencyKey == "" {
		writeJSON(w, http.StatusBadRequest, message{"the " + s.keyHeader + " header is required"})
		return nil, false
	}
	// Receivers compare keys, not bodies: one fingerprint for all.
	c, outcome, sv := s.keys.Begin(d.IdempotencyKey, "", s.now())
	switch outcome {
	case idemstore.InFlight:
		writeJSON(w, http.StatusConflict, message{"a request with this idempotency key is in progress; retry later"})
		return nil, false
	case idemstore.Saved:
		s.mu.Lock()
		s.replays++
		s.mu.Unlock()
		s.replay(w, r, sv)
		return nil, false
	}
	return c, true
}

// refuseWithoutActing answers a delivery the double does not act on (a
// fault.RateLimit or fault.ErrorBefore, or RejectedEvent), releasing the
// claim so that a retry with the key acts, and reports whether it did.
func (s *Server) refuseWithoutActing(w http.ResponseWriter, f fault.Fault, d Delivery, claim *idemstore.Claim[saved]) bool {
	switch {
	case f.Kind == fault.RateLimit:
		s.applyFault(f.Kind)
		claim.Release()
		w.Header().Set("Retry-After", strconv.Itoa(int((f.RetryAfterOrDefault()+time.Second-1)/time.Second)))
		writeJSON(w, http.StatusTooManyRequests, message{"too many requests"})
		return true
	case f.Kind == fault.ErrorBefore:
		s.applyFault(f.Kind)
		claim.Release()
		writeJSON(w, f.StatusOr500(), message{"the receiver failed before handling the event"})
		return true
	case d.Event == RejectedEvent:
		claim.Release()
		writeJSON(w, http.StatusUnprocessableEntity, message{"event " + RejectedEvent + " is not accepted by this receiver"})
		return true
	}
	return false
}

// actAndAnswer acts on the delivery, saves an answer under the claim and
// answers, as the fault drawn (fault.ErrorAfter, fault.LoseResponse,
// fault.Delay, or none) says in Handler's doc.
func (s *Server) actAndAnswer(w http.ResponseWriter, r *http.Request, f fault.Fault, d *Delivery, claim *idemstore.Claim[saved]) {
	accepted := s.act(d)
	switch f.Kind {
	case fault.ErrorAfter:
		s.applyFault(f.Kind)
		status := f.StatusOr500()
		errBody, _ := json.Marshal(message{"the receiver failed after handling the event"})
		if status == http.StatusInternalServerError {
			claim.Finish(saved{status: status, body: errBody})
		} else {
			claim.Finish(accepted)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write(errBody)
	case fault.LoseResponse:
		s.applyFault(f.Kind)
		claim.Finish(accepted)
		fault.DropConnection(w)
	case fault.Delay:
		s.applyFault(f.Kind)
		sleep(r.Context(), f.Delay)
		claim.Finish(accepted)
		writeSaved(w, accepted)
	default:
		claim.Finish(accepted)
		writeSaved(w, accepted)
	}
}

// act records the delivery as an effect and returns the success answer.
func (s *Server) act(d *Delivery) saved {
	d.Ref = newRef()
	d.ReceivedAt = s.now()
	s.mu.Lock()
	s.deliveries = append(s.deliveries, *d)
	s.effects.Add(d.IntentID)
	s.mu.Unlock()
	body, _ := json.Marshal(map[string]any{"received": true, "ref": d.Ref})
	return saved{status: http.StatusOK, ref: d.Ref, body: body}
}

func writeSaved(w http.ResponseWriter, sv saved) {
	if sv.ref != "" {
		w.Header().Set(webhookprovider.DefaultReferenceHeader, sv.ref)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(sv.body)))
	w.WriteHeader(sv.status)
	_, _ = w.Write(sv.body)
}

func (s *Server) replay(w http.ResponseWriter, r *http.Request, sv saved) {
	switch f := s.faults.Next(); f.Kind {
	case fault.Delay:
		s.applyFault(f.Kind)
		sleep(r.Context(), f.Delay)
	case fault.LoseResponse:
		s.applyFault(f.Kind)
		fault.DropConnection(w)
		return
	}
	w.Header().Set(webhookprovider.ReplayedHeader, "true")
	writeSaved(w, sv)
}

func (s *Server) applyFault(k fault.Kind) { s.count(func() { s.applied[k]++ }) }

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

func newRef() string {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		panic(errors.Join(errors.New("webhookdouble: no randomness"), err))
	}
	return "dlv_" + hex.EncodeToString(b)
}
