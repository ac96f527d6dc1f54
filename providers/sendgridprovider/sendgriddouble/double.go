// Package sendgriddouble is a local HTTP server that speaks SendGrid's v3
// Mail Send and Email Activity wire protocol faithfully enough that
// sendgrid-go cannot tell it from the real API. Tests and the demo point the
// SendGrid adapter at it and count the emails it accepted: that count, not
// the dispatcher's bookkeeping, is what exactly-once tests assert on.
//
// Like SendGrid, the double keeps no idempotency of any kind: two identical
// requests are two emails. Faults from a fault.Injector are applied to
// POST /v3/mail/send the way SendGrid would show them (see Config.Faults).
//
// An accepted request is recorded as an Email (one effect of its intent,
// counted by EffectsFor) holding one Delivery per recipient: SendGrid sends
// a copy to every to, cc and bcc address of every personalization
// (DeliveriesFor counts them). Each Delivery keeps the dynamic template data
// its personalization carried, the only data SendGrid renders a dynamic
// template with, and the attachments' filenames. The double refuses, with
// SendGrid's 400 and errors array, what SendGrid documents it refuses: the
// limits on personalizations, recipients, custom_args, categories and
// send_at, an address repeated in a request, attachments that are not
// base64 or lack a filename, a template id its account does not have
// (UnknownTemplateID, or any id not of a dynamic template).
//
// Differences from the real API that callers should know:
//   - templates are not rendered: the double keeps the template id and the
//     data instead, and has no legacy (non "d-") templates;
//   - the Email Activity look-up is immediately consistent, where SendGrid's
//     feed lags by seconds to minutes (the adapter never treats "not found"
//     as proof, so tests lose nothing);
//   - GET /v3/messages understands only unique_args['KEY']="VALUE" and
//     to_email="ADDRESS" conditions joined by AND (the adapter's query:
//     namespace AND key);
//   - the mail send rate-limit headers are informational (the real limit is
//     rarely reached); 429s come from injected fault.RateLimit faults.
package sendgriddouble

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/outboxkit/outbox/providers/fault"
	"github.com/outboxkit/outbox/providers/internal/doubleserver"
	"github.com/outboxkit/outbox/providers/internal/effects"
)

// DefaultAPIKey is the API key the double accepts when Config.APIKey is
// empty. Clients send it as "Authorization: Bearer SG.double-key".
const DefaultAPIKey = "SG.double-key"

// UnverifiedSender is a from address the double always refuses with 403
// "The from address does not match a verified Sender Identity", as SendGrid
// refuses any sender that is not verified. Use it to provoke a permanent
// refusal of a payload that is otherwise valid.
const UnverifiedSender = "blocked@invalid.test"

// UnknownTemplateID is a dynamic template id the double's account does not
// have: a request naming it is refused with 400 "The Template ID must be a
// valid template id for your account", as SendGrid refuses an unknown
// template. Every other dynamic template id ("d-" and letters and digits)
// is known; ids of legacy templates are not.
const UnknownTemplateID = "d-00000000000000000000000000000000"

// Limits SendGrid documents for POST /v3/mail/send, enforced by the double.
const (
	// MaxBodyBytes: a request body of this size or more is refused with 413.
	MaxBodyBytes = 30 << 20
	// MaxPersonalizations is the most personalizations one request may have.
	MaxPersonalizations = 1000
	// MaxRecipients is the most recipients over to, cc and bcc of all
	// personalizations of one request.
	MaxRecipients = 1000
	// MaxCategories is the most categories one email may have.
	MaxCategories = 10
	// MaxTemplateDataBytes: a personalization's dynamic_template_data, as
	// JSON, may be at most this long.
	MaxTemplateDataBytes = 10000
	// MaxCustomArgsBytes: custom_args serialized as JSON must be smaller.
	MaxCustomArgsBytes = 10000
	// MaxSendAtAhead is how far in the future send_at may schedule an email.
	MaxSendAtAhead = 72 * time.Hour
	// MailSendRateLimit is the value of X-RateLimit-Limit on mail send
	// responses (requests per minute).
	MailSendRateLimit = 600
	// ActivityRateLimit is what the real Email Activity API allows per
	// minute; see Config.ActivityRequestsPerMinute.
	ActivityRateLimit = 6
)

// Messages the double answers with, copied from SendGrid's responses.
const (
	msgUnauthorized     = "The provided authorization grant is invalid, expired, or revoked"
	msgTooManyRequests  = "too many requests"
	msgUnverifiedSender = "The from address does not match a verified Sender Identity. Mail cannot be sent until this error is resolved. Visit https://sendgrid.com/docs/for-developers/sending-email/sender-identity/ to see the Sender Identity requirements"
	msgTooLarge         = "The JSON payload you have included in your request is too large."
	msgNotFound         = "resource not found"
)

// AuthFailure is a way SendGrid refuses an account; see SetAuthFailure.
type AuthFailure int

// Account failures SetAuthFailure can make POST /v3/mail/send answer.
const (
	// AuthOK answers normally.
	AuthOK AuthFailure = iota
	// AuthKeyRevoked: 401, the key was revoked, rolled or expired.
	AuthKeyRevoked
	// AuthCreditsExceeded: 401 "Maximum credits exceeded", the plan's
	// sending credits are used up.
	AuthCreditsExceeded
	// AuthMissingScope: 403 "access forbidden", a key without the
	// mail.send scope.
	AuthMissingScope
	// AuthTemporarilyBlocked: 403, the account is blocked from sending for
	// now (a compliance review, a suspension).
	AuthTemporarilyBlocked
)

// Messages of the account failures.
const (
	msgCreditsExceeded    = "Maximum credits exceeded"
	msgAccessForbidden    = "access forbidden"
	msgTemporarilyBlocked = "You are temporarily blocked from sending email. Please contact support."
)

// Config configures a Server. The zero value is usable.
type Config struct {
	// APIKey is the key accepted as "Authorization: Bearer <key>".
	// Defaults to DefaultAPIKey.
	APIKey string
	// Now is the double's clock, used for AcceptedAt, rate-limit resets and
	// send_at checks. Defaults to time.Now.
	Now func() time.Time
	// Faults decides the fault applied to each POST /v3/mail/send, asked
	// once per request after authentication. Defaults to an injector that
	// injects nothing until faults are pushed or rates set (fault.New(1)).
	Faults *fault.Injector
	// LookupFaults decides the fault applied to each GET /v3/messages (the
	// Email Activity look-up), asked once per request after authentication;
	// see Server.LookupFaults. Defaults to an injector that injects nothing.
	LookupFaults *fault.Injector
	// Addr is the address NewServer listens on. Defaults to "127.0.0.1:0"
	// (a free port on the loopback interface).
	Addr string
	// ActivityRequestsPerMinute, when positive, makes GET /v3/messages
	// answer 429 once that many requests were made in the current minute
	// (SendGrid allows ActivityRateLimit). Zero, the default, means no limit.
	ActivityRequestsPerMinute int
	// OnAccept, when set, is called with every email right after it is
	// recorded and before any fault delays or drops the response. Tests use
	// it to act at the exact moment the provider has acted. It must not
	// call back into the Server's blocking methods for long.
	OnAccept func(Email)
}

// Email is one email the double accepted.
type Email struct {
	// MessageID is the X-Message-Id the double answered (or would have
	// answered, had the response not been lost) for the request.
	MessageID string `json:"message_id"`
	// From is the sender's address.
	From string `json:"from"`
	// To, Cc and Bcc list the recipients of every personalization, in order.
	To  []string `json:"to"`
	Cc  []string `json:"cc,omitempty"`
	Bcc []string `json:"bcc,omitempty"`
	// Subject is the top-level subject, or the first personalization's when
	// the request had none.
	Subject string `json:"subject"`
	// CustomArgs are the request's custom_args merged with the first
	// personalization's (the personalization's win), as SendGrid merges them.
	CustomArgs map[string]string `json:"custom_args,omitempty"`
	// Categories are the email's categories.
	Categories []string `json:"categories,omitempty"`
	// TemplateID is the request's template_id, if any.
	TemplateID string `json:"template_id,omitempty"`
	// Attachments are the filenames of the request's attachments, in order.
	Attachments []string `json:"attachments,omitempty"`
	// Deliveries lists the emails SendGrid sends for the request: one per
	// recipient (to, cc and bcc) of every personalization, in order.
	Deliveries []Delivery `json:"deliveries"`
	// AcceptedAt is when the double recorded the email (Config.Now).
	AcceptedAt time.Time `json:"accepted_at"`

	// personalizationArgs holds the merged custom_args of each
	// personalization, for the activity look-up.
	personalizationArgs []map[string]string
}

// Delivery is one email the double sent for an accepted request: the copy
// one recipient gets.
type Delivery struct {
	// MessageID is the request's X-Message-Id.
	MessageID string `json:"message_id"`
	// Personalization is the index of the recipient's personalization.
	Personalization int `json:"personalization"`
	// Field is where the recipient was listed: "to", "cc" or "bcc".
	Field string `json:"field"`
	// Recipient is the recipient's address.
	Recipient string `json:"recipient"`
	// IntentID is custom_args["intent_id"] of the recipient's
	// personalization (the request's merged with its own).
	IntentID string `json:"intent_id,omitempty"`
	// TemplateID is the request's template_id, if any.
	TemplateID string `json:"template_id,omitempty"`
	// DynamicTemplateData is the data the template is rendered with for
	// this recipient: its personalization's dynamic_template_data, the only
	// data SendGrid reads (there is no top-level one to merge). Nil without
	// a template or data. See Data.
	DynamicTemplateData json.RawMessage `json:"dynamic_template_data,omitempty"`
	// Attachments are the filenames of the files the email carries.
	Attachments []string `json:"attachments,omitempty"`
}

// Data decodes DynamicTemplateData (nil when there is none).
func (d Delivery) Data() map[string]any {
	if d.DynamicTemplateData == nil {
		return nil
	}
	var out map[string]any
	_ = json.Unmarshal(d.DynamicTemplateData, &out)
	return out
}

// Stats summarises what the double has done. GET /_double/stats serves it as
// JSON.
type Stats struct {
	// Emails is how many requests were accepted (recorded); each is one
	// effect of its intent, whatever its number of recipients.
	Emails int `json:"emails"`
	// Deliveries is how many emails those requests sent: one per recipient.
	Deliveries int `json:"deliveries"`
	// Requests is how many POST /v3/mail/send requests arrived, whatever
	// their outcome.
	Requests int `json:"requests"`
	// ActivityRequests is how many GET /v3/messages (Email Activity
	// look-ups) arrived, whatever their outcome.
	ActivityRequests int `json:"activity_requests"`
	// Faults counts the faults applied to requests, by kind.
	Faults map[fault.Kind]int `json:"faults"`
	// EffectsByIntent counts accepted emails per custom_args["intent_id"].
	EffectsByIntent map[string]int `json:"effects_by_intent"`
}

// Server is a running SendGrid double. It is safe for concurrent use.
type Server struct {
	cfg     Config
	faults  *fault.Injector
	handler http.Handler

	srv       *doubleserver.Server
	closed    chan struct{}
	closeOnce sync.Once
	closeErr  error

	effects effects.Tally

	mu               sync.Mutex
	emails           []Email
	requests         int
	activityRequests int
	applied          map[fault.Kind]int
	changed          chan struct{} // closed and replaced whenever an email is recorded
	authFailure      AuthFailure
	sendWindow       rateWindow
	activityWind     rateWindow
}

// NewServer starts a double listening on cfg.Addr and serving in a
// goroutine. Close it when done.
func NewServer(cfg Config) (*Server, error) {
	s := newServer(cfg)
	srv, err := doubleserver.Start("sendgriddouble", cfg.Addr, s.handler)
	if err != nil {
		return nil, err
	}
	s.srv = srv
	return s, nil
}

func newServer(cfg Config) *Server {
	if cfg.APIKey == "" {
		cfg.APIKey = DefaultAPIKey
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.LookupFaults == nil {
		cfg.LookupFaults = fault.New(1)
	}
	if cfg.Faults == nil {
		cfg.Faults = fault.New(1)
	}
	s := &Server{
		cfg:     cfg,
		faults:  cfg.Faults,
		closed:  make(chan struct{}),
		applied: map[fault.Kind]int{},
		changed: make(chan struct{}),
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/v3/mail/send", s.handleMailSend)
	mux.HandleFunc("/v3/messages", s.handleMessages)
	mux.HandleFunc("/_double/stats", s.handleStats)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeErrors(w, http.StatusNotFound, apiError{Message: msgNotFound})
	})
	s.handler = mux
	return s
}

// URL is the double's base URL ("http://127.0.0.1:PORT"), to use as the
// adapter's BaseURL or sendgrid.GetRequest's host.
func (s *Server) URL() string {
	if s.srv == nil {
		return ""
	}
	return s.srv.URL()
}

// Close stops the server, closes its connections and wakes requests held by
// a Delay fault. It is safe to call more than once.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		close(s.closed)
		if s.srv != nil {
			s.closeErr = s.srv.Close()
		}
	})
	return s.closeErr
}

// Handler returns the double's HTTP handler, for mounting it in another
// server (httptest.NewServer, say). Requests served through it are recorded
// by this Server like those arriving at URL.
func (s *Server) Handler() http.Handler { return s.handler }

// Faults returns the injector consulted for each POST /v3/mail/send.
func (s *Server) Faults() *fault.Injector { return s.faults }

// LookupFaults returns the injector consulted for each GET /v3/messages:
// ErrorBefore (or ErrorAfter: a read has no effect) answers its Status as
// SendGrid words it (400 "authorization required", what an account
// without the Email Activity add-on gets; 401 an invalid key; 403 "access
// forbidden", a key without the email_activity.read scope; 404; 5xx),
// RateLimit a 429 with X-RateLimit-Reset its RetryAfter ahead, and
// LoseResponse and Delay as for sends.
func (s *Server) LookupFaults() *fault.Injector { return s.cfg.LookupFaults }

// Messages of the refused look-ups.
const (
	msgAuthorizationRequired = "authorization required"
)

// lookupFault applies the next look-up fault to GET /v3/messages; it
// reports whether it answered the request.
func (s *Server) lookupFault(w http.ResponseWriter, r *http.Request) bool {
	f := s.cfg.LookupFaults.Next()
	if f.Kind == fault.None || f.Kind == fault.Delay || f.Kind == fault.LoseResponse {
		return fault.ApplyToRead(w, r, f)
	}
	switch f.Kind {
	case fault.RateLimit:
		w.Header()["X-RateLimit-Reset"] = []string{strconv.FormatInt(unixCeil(s.cfg.Now().Add(f.RetryAfterOrDefault())), 10)}
		writeErrors(w, http.StatusTooManyRequests, apiError{Message: msgTooManyRequests})
		return true
	}
	status := f.StatusOr500()
	msg := http.StatusText(status)
	switch status {
	case http.StatusBadRequest:
		msg = msgAuthorizationRequired
	case http.StatusUnauthorized:
		msg = msgUnauthorized
	case http.StatusForbidden:
		msg = msgAccessForbidden
	case http.StatusNotFound:
		msg = msgNotFound
	}
	writeErrors(w, status, apiError{Message: msg})
	return true
}

// Emails returns a copy of every accepted email, in the order accepted.
func (s *Server) Emails() []Email {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Email, len(s.emails))
	for i, e := range s.emails {
		out[i] = e.clone()
	}
	return out
}

// EffectsFor counts the accepted emails whose custom_args["intent_id"] is
// intentID in decimal.
func (s *Server) EffectsFor(intentID int64) int { return s.effects.For(intentID) }

// DuplicateEffects counts the intent ids (custom_args["intent_id"]) with more
// than one accepted email. An exactly-once run ends with zero.
func (s *Server) DuplicateEffects() int { return s.effects.Duplicates() }

// Stats returns a snapshot of the double's counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	deliveries := 0
	for _, e := range s.emails {
		deliveries += len(e.Deliveries)
	}
	return Stats{Emails: len(s.emails), Deliveries: deliveries, Requests: s.requests, ActivityRequests: s.activityRequests, Faults: maps.Clone(s.applied), EffectsByIntent: s.effects.Snapshot()}
}

// Deliveries returns a copy of every email sent, one per recipient of each
// accepted request, in the order accepted.
func (s *Server) Deliveries() []Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Delivery
	for _, e := range s.emails {
		for _, d := range e.Deliveries {
			out = append(out, d.clone())
		}
	}
	return out
}

// DeliveriesFor counts the emails sent for intentID (custom_args
// ["intent_id"] in decimal): one per recipient of each accepted request.
// EffectsFor counts the requests.
func (s *Server) DeliveriesFor(intentID int64) int {
	want := strconv.FormatInt(intentID, 10)
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, e := range s.emails {
		for _, d := range e.Deliveries {
			if d.IntentID == want {
				n++
			}
		}
	}
	return n
}

// SetAuthFailure makes every POST /v3/mail/send with the right key answer
// as SendGrid answers a misconfigured account (until AuthOK): nothing is
// recorded.
func (s *Server) SetAuthFailure(f AuthFailure) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.authFailure = f
}

// authFailureAnswer is the status and message of the current AuthFailure,
// or 0.
func (s *Server) authFailureAnswer() (int, string) {
	s.mu.Lock()
	f := s.authFailure
	s.mu.Unlock()
	switch f {
	case AuthKeyRevoked:
		return http.StatusUnauthorized, msgUnauthorized
	case AuthCreditsExceeded:
		return http.StatusUnauthorized, msgCreditsExceeded
	case AuthMissingScope:
		return http.StatusForbidden, msgAccessForbidden
	case AuthTemporarilyBlocked:
		return http.StatusForbidden, msgTemporarilyBlocked
	}
	return 0, ""
}

// WaitForEmails blocks until at least n emails have been accepted or ctx
// ends, and returns ctx's error in the latter case. Tests use it instead of
// sleeping when the client gave up before the double recorded.
func (s *Server) WaitForEmails(ctx context.Context, n int) error {
	for {
		s.mu.Lock()
		got, changed := len(s.emails), s.changed
		s.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("sendgriddouble: %d of %d emails accepted: %w", got, n, ctx.Err())
		case <-changed:
		}
	}
}

func (s *Server) record(e Email) {
	s.mu.Lock()
	s.emails = append(s.emails, e)
	s.effects.Add(e.CustomArgs["intent_id"])
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
	if s.cfg.OnAccept != nil {
		s.cfg.OnAccept(e.clone())
	}
}

func (s *Server) countApplied(k fault.Kind) {
	if k == fault.None {
		return
	}
	s.mu.Lock()
	s.applied[k]++
	s.mu.Unlock()
}

func (e Email) clone() Email {
	e.To = append([]string(nil), e.To...)
	e.Cc = append([]string(nil), e.Cc...)
	e.Bcc = append([]string(nil), e.Bcc...)
	e.Categories = append([]string(nil), e.Categories...)
	e.CustomArgs = maps.Clone(e.CustomArgs)
	e.Attachments = append([]string(nil), e.Attachments...)
	deliveries := make([]Delivery, len(e.Deliveries))
	for i, d := range e.Deliveries {
		deliveries[i] = d.clone()
	}
	e.Deliveries = deliveries
	args := make([]map[string]string, len(e.personalizationArgs))
	for i, a := range e.personalizationArgs {
		args[i] = maps.Clone(a)
	}
	e.personalizationArgs = args
	return e
}

func (d Delivery) clone() Delivery {
	d.DynamicTemplateData = append(json.RawMessage(nil), d.DynamicTemplateData...)
	if len(d.DynamicTemplateData) == 0 {
		d.DynamicTemplateData = nil
	}
	d.Attachments = append([]string(nil), d.Attachments...)
	return d
}

func (s *Server) handleStats(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		writeErrors(w, http.StatusMethodNotAllowed, apiError{Message: "method not allowed"})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(s.Stats())
}

// rateWindow counts requests in the current minute, for the X-RateLimit-*
// headers.
type rateWindow struct {
	start time.Time
	count int
}

// hit counts a request at now and returns how many were made in now's
// minute and when that minute ends.
func (rw *rateWindow) hit(now time.Time) (count int, reset time.Time) {
	start := now.Truncate(time.Minute)
	if !start.Equal(rw.start) {
		rw.start, rw.count = start, 0
	}
	rw.count++
	return rw.count, start.Add(time.Minute)
}

func setRateLimitHeaders(w http.ResponseWriter, limit, remaining int, reset time.Time) {
	// SendGrid's spelling; Header().Set would canonicalize it to
	// X-Ratelimit-*. HTTP/1.1 header names are case-insensitive, and Go
	// clients canonicalize them anyway.
	h := w.Header()
	h["X-RateLimit-Limit"] = []string{strconv.Itoa(limit)}
	h["X-RateLimit-Remaining"] = []string{strconv.Itoa(max(remaining, 0))}
	h["X-RateLimit-Reset"] = []string{strconv.FormatInt(unixCeil(reset), 10)}
}

// unixCeil is t in Unix seconds, rounded up.
func unixCeil(t time.Time) int64 {
	secs := t.Unix()
	if t.Nanosecond() > 0 {
		secs++
	}
	return secs
}

// apiError is one entry of SendGrid's {"errors":[...]} body. Field and Help
// are null when unset, as SendGrid sends them.
type apiError struct {
	Message string  `json:"message"`
	Field   *string `json:"field"`
	Help    *string `json:"help"`
}

func fieldError(field, message string) apiError {
	return apiError{Message: message, Field: &field}
}

func writeErrors(w http.ResponseWriter, status int, errs ...apiError) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(struct {
		Errors []apiError `json:"errors"`
	}{errs})
}

// newMessageID returns a random 22-character id shaped like SendGrid's
// X-Message-Id.
func newMessageID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}
