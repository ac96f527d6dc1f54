// Package stripeprovider is the outbox's adapter for Stripe PaymentIntents,
// built on the official stripe-go v76 client.
//
// It performs the intent kind KindPaymentIntent by creating a PaymentIntent,
// sending the intent's idempotency key as Stripe's Idempotency-Key and the
// intent's id as metadata["intent_id"], and classifies every answer into the
// outbox's outcomes as DESIGN.md's table says for a provider with a key,
// taking into account that Stripe saves and replays a POST's 500 under its key
// (so a 500 is ambiguous, not retryable). Reconcile finds a PaymentIntent by
// that metadata through Stripe's search API.
//
// The adapter never retries by itself (stripe-go's MaxNetworkRetries is 0)
// and never uses stripe-go's global key or backends, so several providers
// with different keys can live in one process. The API key never appears in
// errors or logs: stripe-go's logger is silenced and messages are scrubbed.
//
// Tests and demos point BaseURL at package stripedouble's server.
package stripeprovider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/mail"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	stripe "github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/client"

	"github.com/outboxkit/outbox/internal/scrub"
	"github.com/outboxkit/outbox/providers"
)

const (
	// Name is the provider's stable name, stored with each intent.
	Name = "stripe"
	// KindPaymentIntent is the intent kind that creates (and, with
	// "confirm": true, charges) a Stripe PaymentIntent. Its payload is
	// described by PaymentIntentPayload.
	KindPaymentIntent = "stripe.payment_intent"

	// DefaultBaseURL is Stripe's API, used when Config.BaseURL is empty.
	DefaultBaseURL = "https://api.stripe.com"
	// DefaultTimeout is the timeout of the HTTP client built when
	// Config.HTTPClient is nil.
	DefaultTimeout = 30 * time.Second
	// DefaultKeyWindow is how long Stripe is guaranteed to remember an
	// idempotency key (it may prune keys once they are 24 hours old).
	DefaultKeyWindow = 24 * time.Hour
	// MaxKeyLength is the longest idempotency key Stripe (and stripe-go)
	// accepts, in bytes.
	MaxKeyLength = 255

	// IntentIDMetadataKey is the metadata key under which Perform stores the
	// outbox intent id and by which Reconcile searches. Payloads may not use
	// it.
	IntentIDMetadataKey = "intent_id"
)

// Stripe's limits on metadata. One key is taken by IntentIDMetadataKey, so a
// payload may carry at most MaxMetadataKeys-1 keys of its own.
const (
	// MaxMetadataKeys is how many metadata keys Stripe accepts on an object.
	MaxMetadataKeys = 50
	// MaxMetadataKeyLength is the longest metadata key Stripe accepts.
	MaxMetadataKeyLength = 40
	// MaxMetadataValueBytes is the longest metadata value Stripe accepts.
	MaxMetadataValueBytes = 500
	// MaxAmount is the largest amount Stripe accepts (eight digits).
	MaxAmount = 99999999
	// MaxStatementDescriptorSuffix is the longest statement descriptor
	// suffix Stripe accepts.
	MaxStatementDescriptorSuffix = 22
)

// Config configures a Provider.
type Config struct {
	// APIKey is the Stripe secret key. It is never logged and never put in
	// an error. It may be empty for a provider used only to Validate and
	// Redact payloads; Perform and Reconcile then fail without sending
	// anything.
	APIKey string
	// BaseURL is the API's base URL, an absolute http or https URL.
	// Defaults to DefaultBaseURL. Tests point it at a stripedouble server.
	BaseURL string
	// HTTPClient makes the requests. Defaults to a client with
	// DefaultTimeout. Its timeout bounds one attempt; a timeout after the
	// request was written is classified as retryable with the same key.
	HTTPClient *http.Client
	// KeyWindow is how long Stripe remembers an idempotency key, reported
	// in Capabilities. Defaults to DefaultKeyWindow; set it lower to be more
	// conservative. New rejects anything above Stripe's 24 hours.
	KeyWindow time.Duration
}

// Provider performs KindPaymentIntent intents against Stripe. It is safe for
// concurrent use. Create it with New.
type Provider struct {
	cfg Config
	api *client.API // nil when no API key is configured
}

var _ providers.Provider = (*Provider)(nil)

// New validates cfg, fills in defaults and returns a Provider. Errors name
// the offending Config field.
func New(cfg Config) (*Provider, error) {
	if cfg.BaseURL == "" {
		cfg.BaseURL = DefaultBaseURL
	}
	u, err := url.Parse(cfg.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errors.New("stripeprovider: Config.BaseURL must be an absolute http or https URL such as " + DefaultBaseURL)
	}
	if u.User != nil {
		return nil, errors.New("stripeprovider: Config.BaseURL must not contain credentials")
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, errors.New("stripeprovider: Config.BaseURL must not have a query or fragment")
	}
	if cfg.KeyWindow < 0 {
		return nil, fmt.Errorf("stripeprovider: Config.KeyWindow must not be negative, got %s", cfg.KeyWindow)
	}
	if cfg.KeyWindow == 0 {
		cfg.KeyWindow = DefaultKeyWindow
	}
	if cfg.KeyWindow > DefaultKeyWindow {
		// Stripe may forget a key once it is 24 hours old; promising more
		// would let the dispatcher repeat a possibly performed charge.
		return nil, fmt.Errorf("stripeprovider: Config.KeyWindow must not exceed Stripe's %s, got %s", DefaultKeyWindow, cfg.KeyWindow)
	}
	if strings.ContainsAny(cfg.APIKey, " \t\r\n") {
		return nil, errors.New("stripeprovider: Config.APIKey must not contain whitespace")
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: DefaultTimeout, Transport: providers.NewHTTPTransport()}
	}
	p := &Provider{cfg: cfg}
	if cfg.APIKey != "" {
		backend := stripe.GetBackendWithConfig(stripe.APIBackend, &stripe.BackendConfig{
			URL:               stripe.String(strings.TrimSuffix(cfg.BaseURL, "/")),
			HTTPClient:        cfg.HTTPClient,
			MaxNetworkRetries: stripe.Int64(0),
			LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
			EnableTelemetry:   stripe.Bool(false),
		})
		p.api = client.New(cfg.APIKey, &stripe.Backends{API: backend, Connect: backend, Uploads: backend})
	}
	return p, nil
}

// Name returns Name.
func (p *Provider) Name() string { return Name }

// Kinds returns KindPaymentIntent.
func (p *Provider) Kinds() []string { return []string{KindPaymentIntent} }

// Capabilities: Stripe accepts idempotency keys of up to MaxKeyLength bytes,
// remembered for Config.KeyWindow, and PaymentIntents can be searched by
// metadata, so the provider can reconcile.
func (p *Provider) Capabilities() providers.Capabilities {
	return providers.Capabilities{
		IdempotencyKeys: true,
		KeyWindow:       p.cfg.KeyWindow,
		MaxKeyLength:    MaxKeyLength,
		CanReconcile:    true,
	}
}

// PaymentIntentPayload is the JSON payload of a KindPaymentIntent intent.
// Unknown fields are refused.
type PaymentIntentPayload struct {
	// Amount in the currency's smallest unit, 1..MaxAmount. Required.
	Amount *int64 `json:"amount"`
	// Currency is a three-letter lowercase ISO code ("usd"). Required.
	Currency *string `json:"currency"`
	// Customer is a Stripe customer id ("cus_..."). Optional.
	Customer string `json:"customer,omitempty"`
	// PaymentMethod is a Stripe payment method id ("pm_..."). Optional.
	PaymentMethod string `json:"payment_method,omitempty"`
	// Confirm asks Stripe to confirm (charge) the PaymentIntent at once.
	Confirm *bool `json:"confirm,omitempty"`
	// Description is shown in the Stripe dashboard. Optional.
	Description string `json:"description,omitempty"`
	// ReceiptEmail gets Stripe's receipt. Optional; personal data, redacted
	// for display.
	ReceiptEmail string `json:"receipt_email,omitempty"`
	// StatementDescriptorSuffix is at most 22 characters. Optional.
	StatementDescriptorSuffix string `json:"statement_descriptor_suffix,omitempty"`
	// Metadata is copied to the PaymentIntent: at most MaxMetadataKeys-1
	// keys (the adapter adds IntentIDMetadataKey, which is reserved), keys
	// of at most 40 characters, values of at most 500.
	Metadata map[string]string `json:"metadata,omitempty"`
}

var (
	currencyRE = regexp.MustCompile(`^[a-z]{3}$`)
	idRE       = regexp.MustCompile(`^[A-Za-z0-9_]+$`)
)

// Validate checks a KindPaymentIntent payload without doing I/O. It returns
// a *providers.PayloadError naming the field, or an error wrapping
// providers.ErrUnknownKind for another kind.
func (p *Provider) Validate(kind string, payload json.RawMessage) error {
	_, err := decode(kind, payload)
	return err
}

func decode(kind string, payload json.RawMessage) (*PaymentIntentPayload, error) {
	if kind != KindPaymentIntent {
		return nil, providers.UnknownKindError(kind)
	}
	var pl PaymentIntentPayload
	if err := providers.DecodePayload(kind, payload, &pl); err != nil {
		return nil, err
	}
	bad := func(field, reason string) error {
		return &providers.PayloadError{Kind: kind, Field: field, Reason: reason}
	}
	switch {
	case pl.Amount == nil:
		return nil, bad("amount", "is required")
	case *pl.Amount <= 0:
		return nil, bad("amount", "must be a positive integer (in the currency's smallest unit)")
	case *pl.Amount > MaxAmount:
		return nil, bad("amount", fmt.Sprintf("must be at most %d", MaxAmount))
	case pl.Currency == nil || *pl.Currency == "":
		return nil, bad("currency", "is required")
	case !currencyRE.MatchString(*pl.Currency):
		return nil, bad("currency", "must be a three-letter lowercase ISO currency code such as \"usd\"")
	case pl.Customer != "" && (!strings.HasPrefix(pl.Customer, "cus_") || !idRE.MatchString(pl.Customer)):
		return nil, bad("customer", "must be a Stripe customer id (cus_...)")
	case pl.PaymentMethod != "" && !idRE.MatchString(pl.PaymentMethod):
		return nil, bad("payment_method", "must be a Stripe payment method id (pm_...)")
	case len(pl.Description) > 1000:
		return nil, bad("description", "must be at most 1000 characters")
	case pl.ReceiptEmail != "" && !validEmail(pl.ReceiptEmail):
		return nil, bad("receipt_email", "must be an email address")
	case len(pl.StatementDescriptorSuffix) > MaxStatementDescriptorSuffix:
		return nil, bad("statement_descriptor_suffix", fmt.Sprintf("must be at most %d characters", MaxStatementDescriptorSuffix))
	case strings.ContainsAny(pl.StatementDescriptorSuffix, `<>\'"*`):
		return nil, bad("statement_descriptor_suffix", `must not contain any of < > \ ' " *`)
	case len(pl.Metadata) > MaxMetadataKeys-1:
		return nil, bad("metadata", fmt.Sprintf("must have at most %d keys (Stripe allows %d and %q is added)", MaxMetadataKeys-1, MaxMetadataKeys, IntentIDMetadataKey))
	}
	for k, v := range pl.Metadata {
		field := "metadata." + k
		switch {
		case k == IntentIDMetadataKey:
			return nil, bad(field, "is reserved: the outbox sets it to the intent's id")
		case k == "":
			return nil, bad("metadata", "keys must not be empty")
		case len(k) > MaxMetadataKeyLength:
			return nil, bad(field, fmt.Sprintf("key must be at most %d characters", MaxMetadataKeyLength))
		case strings.ContainsAny(k, "[]"):
			return nil, bad(field, "key must not contain square brackets")
		case len(v) > MaxMetadataValueBytes:
			return nil, bad(field, fmt.Sprintf("value must be at most %d characters", MaxMetadataValueBytes))
		}
	}
	return &pl, nil
}

func validEmail(s string) bool {
	a, err := mail.ParseAddress(s)
	if err != nil || a.Address != s || a.Name != "" {
		return false
	}
	at := strings.LastIndexByte(s, '@')
	return at > 0 && strings.Contains(s[at+1:], ".")
}

// Perform creates the PaymentIntent described by req, with req.IdempotencyKey
// as Stripe's Idempotency-Key and req.IntentID in metadata["intent_id"]. On
// success the Result carries the PaymentIntent's id and whether Stripe
// replayed a saved response. Otherwise the error is a *providers.AttemptError:
//
//   - 402 card_error: failed, Code the decline code;
//   - 400 (including idempotency_error: the key was reused with other
//     parameters), 401, 403, 404: failed, with Stripe's message;
//   - 409 (idempotency_key_in_use), 429 (RetryAfter from Retry-After), 502,
//     503, 504, or any answer with "Stripe-Should-Retry: true": retry;
//   - 500: ambiguous, because Stripe saved the 500 under the key and would
//     replay it to every retry, while the charge may or may not exist;
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
// A payload that fails validation, an empty or over-long key, or a provider
// without an API key fail without sending.
func (p *Provider) Perform(ctx context.Context, req providers.Request) (providers.Result, error) {
	pl, err := decode(req.Kind, req.Payload)
	if err != nil {
		return providers.Result{}, &providers.AttemptError{Outcome: providers.OutcomeFailed, Message: err.Error(), Err: err}
	}
	if err := p.ready(); err != nil {
		return providers.Result{}, err
	}
	if strings.TrimSpace(req.IdempotencyKey) == "" {
		return providers.Result{}, &providers.AttemptError{Outcome: providers.OutcomeFailed, Message: "the intent has no idempotency key; refusing to charge without one"}
	}
	if len(strings.TrimSpace(req.IdempotencyKey)) > MaxKeyLength {
		return providers.Result{}, &providers.AttemptError{Outcome: providers.OutcomeFailed, Message: fmt.Sprintf("the idempotency key is longer than Stripe's %d bytes", MaxKeyLength)}
	}

	params := &stripe.PaymentIntentParams{
		Amount:   pl.Amount,
		Currency: pl.Currency,
		Confirm:  pl.Confirm,
	}
	params.Context = ctx
	params.SetIdempotencyKey(req.IdempotencyKey)
	optional := func(v string) *string {
		if v == "" {
			return nil
		}
		return stripe.String(v)
	}
	params.Customer = optional(pl.Customer)
	params.PaymentMethod = optional(pl.PaymentMethod)
	params.Description = optional(pl.Description)
	params.ReceiptEmail = optional(pl.ReceiptEmail)
	params.StatementDescriptorSuffix = optional(pl.StatementDescriptorSuffix)
	for k, v := range pl.Metadata {
		params.AddMetadata(k, v)
	}
	params.AddMetadata(IntentIDMetadataKey, strconv.FormatInt(req.IntentID, 10))

	pi, err := p.api.PaymentIntents.New(params)
	if err != nil {
		return providers.Result{}, p.classify(err)
	}
	res := providers.Result{ProviderRef: pi.ID}
	if pi.LastResponse != nil {
		res.HTTPStatus = pi.LastResponse.StatusCode
		res.Replayed = pi.LastResponse.Header.Get("Idempotent-Replayed") == "true"
	}
	return res, nil
}

func (p *Provider) ready() error {
	if p.api == nil {
		return &providers.AttemptError{Outcome: providers.OutcomeFailed, Message: "the Stripe API key is not configured"}
	}
	return nil
}

// classify turns a stripe-go error into an *providers.AttemptError.
func (p *Provider) classify(err error) *providers.AttemptError {
	var se *stripe.Error
	if !errors.As(err, &se) {
		// No Stripe answer: the request never left, or it may have reached
		// Stripe and the key makes repeating it safe. Either way, retry.
		ae := providers.ClassifyTransport(err, true)
		ae.Message = p.scrub(err.Error())
		ae.Err = &scrub.Error{Msg: ae.Message, Err: err}
		return ae
	}
	status := se.HTTPStatusCode
	var header http.Header
	if se.LastResponse != nil {
		header = se.LastResponse.Header
	}
	ae := &providers.AttemptError{
		HTTPStatus: status,
		Code:       string(se.Code),
		Message:    p.scrub(se.Msg),
	}
	if ae.Message == "" {
		ae.Message = http.StatusText(status)
	}
	ae.Err = &scrub.Error{Msg: fmt.Sprintf("stripe: HTTP %d %s: %s", status, se.Type, ae.Message), Err: err}
	switch {
	case status == http.StatusPaymentRequired || se.Type == stripe.ErrorTypeCard:
		ae.Outcome = providers.OutcomeFailed
		if se.DeclineCode != "" {
			ae.Code = string(se.DeclineCode)
			ae.Message += " (decline code: " + string(se.DeclineCode) + ")"
		}
	case header.Get("Stripe-Should-Retry") == "true":
		ae.Outcome = providers.OutcomeRetry
	case status == http.StatusConflict:
		ae.Outcome = providers.OutcomeRetry
	case status == http.StatusTooManyRequests:
		ae.Outcome = providers.OutcomeRetry
		ae.RetryAfter = retryAfter(header.Get("Retry-After"), time.Now())
	case se.Type == stripe.ErrorTypeIdempotency:
		ae.Outcome = providers.OutcomeFailed
		if ae.Code == "" {
			ae.Code = string(stripe.ErrorTypeIdempotency)
		}
	case status >= 400 && status < 500:
		ae.Outcome = providers.OutcomeFailed
	case status == http.StatusInternalServerError:
		ae.Outcome = providers.OutcomeAmbiguous
	case status > 500:
		ae.Outcome = providers.OutcomeRetry
	default:
		ae.Outcome = providers.OutcomeAmbiguous
	}
	return ae
}

func (p *Provider) scrub(s string) string {
	if p.cfg.APIKey == "" {
		return s
	}
	return strings.ReplaceAll(s, p.cfg.APIKey, "[redacted]")
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

// Reconcile searches Stripe for a PaymentIntent whose metadata["intent_id"]
// is req.IntentID. It returns found=true with its id when one exists in a
// state showing the effect happened: any state but canceled for a payload
// that does not confirm; succeeded, processing or requires_capture for one
// that does. It returns found=false and a nil error when there is none.
//
// When PaymentIntents exist for the intent but none shows the effect (the
// payment was declined or awaits customer action), it returns found=false
// and a *providers.AttemptError saying so: neither "performed" nor "never
// happened" is true, and repeating could charge twice, so the intent must be
// held for an operator.
//
// Stripe's search is eventually consistent (usually under a minute, longer
// during outages): a PaymentIntent created moments ago may not be found yet.
// Callers should reconcile only some time after the ambiguous attempt.
func (p *Provider) Reconcile(ctx context.Context, req providers.Request) (providers.Result, bool, error) {
	if req.Kind != KindPaymentIntent {
		return providers.Result{}, false, providers.UnknownKindError(req.Kind)
	}
	if err := p.ready(); err != nil {
		return providers.Result{}, false, err
	}
	confirm := true // unknown payload: assume the stricter reading
	if pl, err := decode(req.Kind, req.Payload); err == nil && (pl.Confirm == nil || !*pl.Confirm) {
		confirm = false
	}
	params := &stripe.PaymentIntentSearchParams{}
	params.Context = ctx
	params.Query = fmt.Sprintf("metadata['%s']:'%d'", IntentIDMetadataKey, req.IntentID)
	params.Limit = stripe.Int64(100)
	iter := p.api.PaymentIntents.Search(params)
	var others []*stripe.PaymentIntent
	for iter.Next() {
		pi := iter.PaymentIntent()
		if effective(pi, confirm) {
			res := providers.Result{ProviderRef: pi.ID}
			if lr := iter.PaymentIntentSearchResult().LastResponse; lr != nil {
				res.HTTPStatus = lr.StatusCode
			}
			return res, true, nil
		}
		others = append(others, pi)
	}
	if err := iter.Err(); err != nil {
		return providers.Result{}, false, p.classify(err)
	}
	if len(others) > 0 {
		pi := others[0]
		ae := &providers.AttemptError{
			Outcome: providers.OutcomeFailed,
			Message: fmt.Sprintf("PaymentIntent %s exists for this intent but is %s", pi.ID, pi.Status),
		}
		if le := pi.LastPaymentError; le != nil {
			ae.Code = string(le.DeclineCode)
			if ae.Code == "" {
				ae.Code = string(le.Code)
			}
			if le.Msg != "" {
				ae.Message += ": " + p.scrub(le.Msg)
			}
		}
		return providers.Result{}, false, ae
	}
	return providers.Result{}, false, nil
}

func effective(pi *stripe.PaymentIntent, confirm bool) bool {
	if !confirm {
		return pi.Status != stripe.PaymentIntentStatusCanceled
	}
	switch pi.Status {
	case stripe.PaymentIntentStatusSucceeded, stripe.PaymentIntentStatusProcessing, stripe.PaymentIntentStatusRequiresCapture:
		return true
	}
	return false
}

// Redact returns a copy of payload for display: receipt_email keeps its
// first character and domain ("j***@example.com"), payment_method keeps its
// prefix and last four characters ("pm_***4242"), and metadata values whose
// key mentions email, phone, token, secret or card are replaced. A payload
// that is not a JSON object becomes {"redacted":"unparseable payload"}.
// Redact never fails and does not validate.
func (p *Provider) Redact(kind string, payload json.RawMessage) json.RawMessage {
	var m map[string]any
	if err := json.Unmarshal(payload, &m); err != nil || m == nil {
		return json.RawMessage(`{"redacted":"unparseable payload"}`)
	}
	if v, ok := m["receipt_email"]; ok && v != nil {
		s, _ := v.(string)
		m["receipt_email"] = maskEmail(s)
	}
	if v, ok := m["payment_method"]; ok && v != nil {
		s, _ := v.(string)
		m["payment_method"] = maskID(s)
	}
	if md, ok := m["metadata"].(map[string]any); ok {
		for k, v := range md {
			if sensitiveKey(k) && v != nil {
				md[k] = redactedValue
			}
		}
	} else if v, ok := m["metadata"]; ok && v != nil {
		m["metadata"] = redactedValue
	}
	out, err := json.Marshal(m)
	if err != nil {
		return json.RawMessage(`{"redacted":"unparseable payload"}`)
	}
	return out
}

const redactedValue = "[redacted]"

func sensitiveKey(k string) bool {
	k = strings.ToLower(k)
	for _, s := range []string{"email", "phone", "token", "secret", "card"} {
		if strings.Contains(k, s) {
			return true
		}
	}
	return false
}

func maskEmail(s string) string {
	at := strings.LastIndexByte(s, '@')
	if at <= 0 {
		return redactedValue
	}
	_, n := utf8.DecodeRuneInString(s)
	return s[:n] + "***" + s[at:]
}

func maskID(s string) string {
	prefix := ""
	if i := strings.IndexByte(s, '_'); i >= 0 && i <= 4 {
		prefix = s[:i+1]
	}
	rest := s[len(prefix):]
	if len(rest) <= 4 {
		return prefix + "***"
	}
	return prefix + "***" + rest[len(rest)-4:]
}
