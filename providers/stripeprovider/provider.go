// Package stripeprovider is the outbox's adapter for Stripe PaymentIntents,
// built on the official stripe-go v76 client.
//
// It performs the intent kind KindPaymentIntent by creating a PaymentIntent,
// sending the intent's idempotency key as Stripe's Idempotency-Key and the
// intent's identity in metadata (outbox_namespace, outbox_key and, for people
// reading the dashboard, intent_id), and classifies every answer into the
// outbox's outcomes as DESIGN.md's table says for a provider with a key,
// taking into account that Stripe saves and replays a POST's 500 under its key
// (so a 500 is ambiguous, not retryable).
//
// A confirmed charge succeeds only when Stripe charged (succeeded) or
// authorised it (requires_capture, with capture_method manual); a
// background charge (confirm and off_session) that names no payment method
// choice is sent with automatic_payment_methods[enabled]=true and
// allow_redirects=never, so that it can never need a redirect. Payloads
// Stripe would refuse (amounts under a currency's minimum, parameter
// combinations it rejects) are refused by Validate when recorded.
//
// Reconcile lists PaymentIntents (GET /v1/payment_intents, strongly
// consistent) by customer and creation window and keeps only those carrying
// the intent's namespace and key, so it never adopts another deployment's
// PaymentIntent and can prove absence. Intents recorded before namespaces
// existed fall back to Stripe's eventually consistent search by intent_id,
// which never proves absence.
//
// The adapter never retries by itself (stripe-go's MaxNetworkRetries is 0)
// and never uses stripe-go's global key or backends, so several providers
// with different keys can live in one process. The API key never appears in
// errors or logs: stripe-go's logger is silenced and messages are scrubbed.
//
// It also performs what follows a charge: KindRefund (POST /v1/refunds),
// KindCapture (POST /v1/payment_intents/{id}/capture) and KindCancel
// (POST /v1/payment_intents/{id}/cancel), each with the intent's key as
// Idempotency-Key, and reconciles them by strongly consistent reads: the
// refunds of the PaymentIntent listed and matched by namespace and key,
// the PaymentIntent itself for a capture or a cancel (see money.go).
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
	"slices"
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
	// outbox intent id, for display, and by which Reconcile searches for
	// intents recorded before namespaces existed. Payloads may not use it.
	IntentIDMetadataKey = providers.MetadataIntentID
	// NamespaceMetadataKey carries the deployment's namespace
	// (providers.Request.Namespace) when it has one. Payloads may not use it.
	NamespaceMetadataKey = providers.MetadataNamespace
	// KeyMetadataKey carries the provider-facing idempotency key
	// (providers.Request.IdempotencyKey). Payloads may not use it.
	KeyMetadataKey = providers.MetadataKey

	// ReservedMetadataKeys is how many metadata keys the adapter reserves
	// for the intent's identity (namespace, key and intent id), whether or
	// not a request uses all of them.
	ReservedMetadataKeys = 3

	// ListClockSkewMargin is subtracted from Request.KeyFirstUsedAt (the
	// dispatcher's clock) to get the lower bound of the creation window
	// Reconcile lists (Stripe's clock), so that a PaymentIntent is not missed
	// because the two clocks disagree.
	ListClockSkewMargin = 15 * time.Minute
	// DefaultReconcileMaxPages bounds the pages of 100 PaymentIntents
	// Reconcile lists, when Config.ReconcileMaxPages is 0. A listing cut
	// short by the bound proves nothing (providers.ErrAbsenceNotProven).
	DefaultReconcileMaxPages = 10
	// CodeProviderAuth is the AttemptError Code of an attempt Stripe
	// refused for the account's credentials (401, 403): OutcomeRetry with
	// DidNotAct, so that a rolled key holds the queue instead of failing it.
	CodeProviderAuth = "provider_auth"

	// listPageSize is how many PaymentIntents Reconcile asks for per page,
	// Stripe's maximum.
	listPageSize = 100
)

// reservedMetadata lists the metadata keys payloads may not use.
var reservedMetadata = []string{NamespaceMetadataKey, KeyMetadataKey, IntentIDMetadataKey}

// Stripe's limits on metadata. ReservedMetadataKeys keys are taken by the
// intent's identity, so a payload may carry at most
// MaxMetadataKeys-ReservedMetadataKeys keys of its own.
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
	// ReconcileMaxPages bounds how many pages (of 100 PaymentIntents)
	// Reconcile lists before it gives up with an error wrapping
	// providers.ErrAbsenceNotProven. Defaults to DefaultReconcileMaxPages.
	ReconcileMaxPages int
}

// Provider performs KindPaymentIntent, KindRefund, KindCapture and
// KindCancel intents against Stripe. It is safe for concurrent use. Create
// it with New.
type Provider struct {
	cfg      Config
	api      *client.API // nil when no API key is configured
	pageSize int64
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
	if cfg.ReconcileMaxPages < 0 {
		return nil, fmt.Errorf("stripeprovider: Config.ReconcileMaxPages must not be negative, got %d", cfg.ReconcileMaxPages)
	}
	if cfg.ReconcileMaxPages == 0 {
		cfg.ReconcileMaxPages = DefaultReconcileMaxPages
	}
	if strings.ContainsAny(cfg.APIKey, " \t\r\n") {
		return nil, errors.New("stripeprovider: Config.APIKey must not contain whitespace")
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: DefaultTimeout, Transport: providers.NewHTTPTransport()}
	}
	p := &Provider{cfg: cfg, pageSize: listPageSize}
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

// Kinds returns KindPaymentIntent, KindRefund, KindCapture and KindCancel.
func (p *Provider) Kinds() []string {
	return []string{KindPaymentIntent, KindRefund, KindCapture, KindCancel}
}

// Capabilities: Stripe accepts idempotency keys of up to MaxKeyLength bytes,
// remembered for Config.KeyWindow, and PaymentIntents can be listed and told
// apart by the identity Perform puts in their metadata, so the provider can
// reconcile.
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
	// OffSession marks a charge made while the customer is not present (a
	// background charge): Stripe then fails it with 402
	// authentication_required instead of asking the customer to
	// authenticate. It requires Confirm.
	OffSession *bool `json:"off_session,omitempty"`
	// CaptureMethod is "automatic" (Stripe's default), "automatic_async" or
	// "manual". A manual capture only authorises: the PaymentIntent waits in
	// requires_capture until captured (within 7 days for most cards).
	CaptureMethod string `json:"capture_method,omitempty"`
	// PaymentMethodTypes lists the payment method types the PaymentIntent
	// may use ("card"). Not with AutomaticPaymentMethods.
	PaymentMethodTypes []string `json:"payment_method_types,omitempty"`
	// AutomaticPaymentMethods lets Stripe use the payment methods enabled
	// in the Dashboard. Not with PaymentMethodTypes.
	//
	// When Confirm is true and neither AutomaticPaymentMethods nor
	// PaymentMethodTypes is given, Perform sends
	// automatic_payment_methods[enabled]=true and
	// automatic_payment_methods[allow_redirects]=never: a background charge
	// that can never need a redirect, which Stripe accepts without a
	// return_url. (Without either, Stripe's API from 2023-08-16 on enables
	// the Dashboard's payment methods, redirects included, and refuses to
	// confirm without a return_url.)
	AutomaticPaymentMethods *AutomaticPaymentMethods `json:"automatic_payment_methods,omitempty"`
	// ReturnURL is where a redirect-based payment method sends the customer
	// back. Only with Confirm; required when confirming with
	// AutomaticPaymentMethods that allow redirects.
	ReturnURL string `json:"return_url,omitempty"`
	// SetupFutureUsage saves the payment method for later: "on_session" or
	// "off_session". Stripe refuses "on_session" on an off-session charge.
	SetupFutureUsage string `json:"setup_future_usage,omitempty"`
	// Metadata is copied to the PaymentIntent: at most
	// MaxMetadataKeys-ReservedMetadataKeys keys (the adapter adds
	// NamespaceMetadataKey, KeyMetadataKey and IntentIDMetadataKey, which are
	// reserved), keys of at most 40 characters, values of at most 500.
	Metadata map[string]string `json:"metadata,omitempty"`
}

// AutomaticPaymentMethods is automatic_payment_methods of a
// PaymentIntentPayload.
type AutomaticPaymentMethods struct {
	// Enabled is required.
	Enabled *bool `json:"enabled"`
	// AllowRedirects is "always" (Stripe's default) or "never". With
	// "never", only payment methods that cannot need a redirect are used,
	// and confirming needs no return_url.
	AllowRedirects string `json:"allow_redirects,omitempty"`
}

// Values of PaymentIntentPayload's enumerated fields.
const (
	CaptureAutomatic      = "automatic"
	CaptureAutomaticAsync = "automatic_async"
	CaptureManual         = "manual"

	SetupOnSession  = "on_session"
	SetupOffSession = "off_session"

	RedirectsAlways = "always"
	RedirectsNever  = "never"
)

var (
	currencyRE = regexp.MustCompile(`^[a-z]{3}$`)
	pmTypeRE   = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	idRE       = regexp.MustCompile(`^[A-Za-z0-9_]+$`)
)

// Validate checks a payload of one of the provider's kinds without doing
// I/O. It returns a *providers.PayloadError naming the field, or an error
// wrapping providers.ErrUnknownKind for another kind.
func (p *Provider) Validate(kind string, payload json.RawMessage) error {
	_, err := decodeAny(kind, payload)
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
	case pl.StatementDescriptorSuffix != "" && !hasLetter(pl.StatementDescriptorSuffix):
		return nil, bad("statement_descriptor_suffix", "must contain at least one letter")
	}
	if err := checkAmount(kind, *pl.Amount, *pl.Currency); err != nil {
		return nil, err
	}
	if err := checkCharge(kind, &pl); err != nil {
		return nil, err
	}
	if err := checkMetadata(kind, pl.Metadata, reservedMetadata); err != nil {
		return nil, err
	}
	return &pl, nil
}

// checkMetadata refuses a payload's metadata that uses a reserved key or
// that Stripe would refuse.
func checkMetadata(kind string, md map[string]string, reserved []string) error {
	bad := func(field, reason string) error {
		return &providers.PayloadError{Kind: kind, Field: field, Reason: reason}
	}
	for _, k := range reserved {
		if _, ok := md[k]; ok {
			return bad("metadata."+k, "is reserved: the outbox sets it to the intent's identity")
		}
	}
	if len(md) > MaxMetadataKeys-len(reserved) {
		return bad("metadata", fmt.Sprintf("must have at most %d keys (Stripe allows %d and the outbox adds %s)",
			MaxMetadataKeys-len(reserved), MaxMetadataKeys, strings.Join(reserved, ", ")))
	}
	for k, v := range md {
		field := "metadata." + k
		switch {
		case k == "":
			return bad("metadata", "keys must not be empty")
		case len(k) > MaxMetadataKeyLength:
			return bad(field, fmt.Sprintf("key must be at most %d characters", MaxMetadataKeyLength))
		case strings.ContainsAny(k, "[]"):
			return bad(field, "key must not contain square brackets")
		case len(v) > MaxMetadataValueBytes:
			return bad(field, fmt.Sprintf("value must be at most %d characters", MaxMetadataValueBytes))
		}
	}
	return nil
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
	if strings.TrimSpace(req.IdempotencyKey) == "" {
		return providers.Result{}, &providers.AttemptError{Outcome: providers.OutcomeFailed, Message: "the intent has no idempotency key; refusing to move money without one", DidNotAct: true}
	}
	if len(strings.TrimSpace(req.IdempotencyKey)) > MaxKeyLength {
		return providers.Result{}, &providers.AttemptError{Outcome: providers.OutcomeFailed, Message: fmt.Sprintf("the idempotency key is longer than Stripe's %d bytes", MaxKeyLength), DidNotAct: true}
	}
	if len(req.Namespace) > MaxMetadataValueBytes {
		return providers.Result{}, &providers.AttemptError{Outcome: providers.OutcomeFailed, Message: fmt.Sprintf("the namespace is longer than the %d bytes a Stripe metadata value may have", MaxMetadataValueBytes), DidNotAct: true}
	}
	var pl *PaymentIntentPayload
	switch d := decoded.(type) {
	case *RefundPayload:
		return p.performRefund(ctx, req, d)
	case *CapturePayload:
		return p.performCapture(ctx, req, d)
	case *CancelPayload:
		return p.performCancel(ctx, req, d)
	case *PaymentIntentPayload:
		pl = d
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
	params.OffSession = pl.OffSession
	params.CaptureMethod = optional(pl.CaptureMethod)
	params.ReturnURL = optional(pl.ReturnURL)
	params.SetupFutureUsage = optional(pl.SetupFutureUsage)
	if pl.PaymentMethodTypes != nil {
		params.PaymentMethodTypes = stripe.StringSlice(pl.PaymentMethodTypes)
	}
	if apm := pl.AutomaticPaymentMethods; apm != nil {
		params.AutomaticPaymentMethods = &stripe.PaymentIntentAutomaticPaymentMethodsParams{Enabled: apm.Enabled, AllowRedirects: optional(apm.AllowRedirects)}
	} else if redirectFreeDefault(pl) {
		params.AutomaticPaymentMethods = &stripe.PaymentIntentAutomaticPaymentMethodsParams{Enabled: stripe.Bool(true), AllowRedirects: stripe.String(RedirectsNever)}
	}
	tagIntent(&params.Params, pl.Metadata, req, intentKeys)

	pi, err := p.api.PaymentIntents.New(params)
	if err != nil {
		return providers.Result{}, p.classify(err)
	}
	res := resultOf(pi.ID, pi.LastResponse)
	if res.Replayed && pi.Status == stripe.PaymentIntentStatusProcessing {
		// Stripe replays the saved answer, which said processing: ask for
		// the PaymentIntent as it is now.
		gp := &stripe.PaymentIntentParams{}
		gp.Context = ctx
		now, err := p.api.PaymentIntents.Get(pi.ID, gp)
		if err != nil {
			// The PaymentIntent exists and may settle: retried with the
			// same key, never DidNotAct.
			le := p.classifyLookup(err)
			return providers.Result{}, &providers.AttemptError{Outcome: providers.OutcomeRetry, HTTPStatus: le.HTTPStatus, Code: le.Code, RetryAfter: le.RetryAfter,
				Message: fmt.Sprintf("PaymentIntent %s was processing; looking up its status failed: %s", pi.ID, le.Message), Err: le}
		}
		pi = now
	}
	if ae := p.judge(pi, pl, res.HTTPStatus); ae != nil {
		return providers.Result{}, ae
	}
	return res, nil
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

// CheckConfigured implements providers.Configured: without Config.APIKey
// the provider validates and redacts, but performs nothing.
func (p *Provider) CheckConfigured() error {
	if p.api == nil {
		return errors.New("stripeprovider: Config.APIKey is empty: this provider can validate and redact intents, not perform them")
	}
	return nil
}

func (p *Provider) ready() error {
	if p.api == nil {
		return &providers.AttemptError{Outcome: providers.OutcomeFailed, Message: "the Stripe API key is not configured", DidNotAct: true}
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
	shouldRetry := header.Get("Stripe-Should-Retry")
	switch {
	case status == http.StatusPaymentRequired || se.Type == stripe.ErrorTypeCard:
		// A decline: Stripe refused to charge. (The declined PaymentIntent
		// is saved under the key, so a repeat replays the decline.)
		ae.Outcome = providers.OutcomeFailed
		ae.DidNotAct = true
		if se.DeclineCode != "" {
			ae.Code = string(se.DeclineCode)
			ae.Message += " (decline code: " + string(se.DeclineCode) + ")"
		}
		if se.Code == stripe.ErrorCodeAuthenticationRequired || se.DeclineCode == stripe.DeclineCodeAuthenticationRequired {
			ae.Code = string(stripe.ErrorCodeAuthenticationRequired)
			ae.Message = "the bank asks the customer to authenticate; an off-session charge cannot, ask the customer to pay in session (Stripe: " + ae.Message + ")"
		}
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		// The account, not the intent: a rolled or expired key, a
		// restricted key without this permission. Nothing was done; once
		// the credentials are fixed the same request succeeds.
		ae.Outcome = providers.OutcomeRetry
		ae.DidNotAct = true
		ae.Code = CodeProviderAuth
		ae.Message = fmt.Sprintf("Stripe refused the API key (HTTP %d): fix the Stripe credentials (Config.APIKey) or the key's permissions; the charge is retried. Stripe: %s", status, ae.Message)
	case se.Type == stripe.ErrorTypeIdempotency:
		// The key's first request may have acted: not DidNotAct, whatever
		// Stripe-Should-Retry says of this one (a typed error is decided
		// before the hint header, DESIGN.md invariant 13).
		ae.Outcome = providers.OutcomeFailed
		if ae.Code == "" {
			ae.Code = string(stripe.ErrorTypeIdempotency)
		}
	case shouldRetry == "true":
		ae.Outcome = providers.OutcomeRetry
	case shouldRetry == "false" && status >= 500:
		// Stripe says a repeat will not help, and the request may have
		// acted: only a look-up can tell.
		ae.Outcome = providers.OutcomeAmbiguous
	case shouldRetry == "false":
		ae.Outcome = providers.OutcomeFailed
		ae.DidNotAct = status == http.StatusBadRequest || status == http.StatusNotFound || status == http.StatusTooManyRequests
	case status == http.StatusConflict:
		ae.Outcome = providers.OutcomeRetry
	case status == http.StatusTooManyRequests:
		ae.Outcome = providers.OutcomeRetry
		ae.RetryAfter = retryAfter(header.Get("Retry-After"), time.Now())
		ae.DidNotAct = true
	case status == http.StatusFailedDependency:
		// 424: a service Stripe depends on failed while the request was
		// executing; the charge may or may not have happened.
		ae.Outcome = providers.OutcomeAmbiguous
	case status >= 400 && status < 500:
		ae.Outcome = providers.OutcomeFailed
		// Validation 400s and 404 are refused before anything is done or
		// saved.
		ae.DidNotAct = status == http.StatusBadRequest || status == http.StatusNotFound
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
	var pl *PaymentIntentPayload
	switch d := decoded.(type) {
	case *CancelPayload:
		return p.reconcileCancel(ctx, d)
	case *RefundPayload, *CapturePayload:
		if strings.TrimSpace(req.IdempotencyKey) == "" {
			return providers.Result{}, false, errors.New("stripeprovider: cannot reconcile an intent without an idempotency key")
		}
		if rp, ok := d.(*RefundPayload); ok {
			return p.reconcileRefund(ctx, req, rp)
		}
		return p.reconcileCapture(ctx, req, d.(*CapturePayload))
	case *PaymentIntentPayload:
		pl = d
	}
	if req.Namespace == "" {
		return p.reconcileLegacy(ctx, req, pl)
	}
	if strings.TrimSpace(req.IdempotencyKey) == "" {
		return providers.Result{}, false, errors.New("stripeprovider: cannot reconcile an intent without an idempotency key")
	}
	confirm := pl.Confirm != nil && *pl.Confirm

	params := &stripe.PaymentIntentListParams{}
	params.Context = ctx
	params.Single = true // one page per call: the bound below counts them
	params.Limit = stripe.Int64(p.pageSize)
	if pl.Customer != "" {
		params.Customer = stripe.String(pl.Customer)
	}
	if !req.KeyFirstUsedAt.IsZero() {
		params.CreatedRange = &stripe.RangeQueryParams{GreaterThanOrEqual: req.KeyFirstUsedAt.Add(-ListClockSkewMargin).Unix()}
	}

	var (
		found    *stripe.PaymentIntent
		inert    *stripe.PaymentIntent
		settling *stripe.PaymentIntent
	)
	status, complete, err := scanOwned(p, req, ownedList[*stripe.PaymentIntent]{
		params: &params.ListParams,
		page:   func() *stripe.Iter { return p.api.PaymentIntents.List(params).Iter },
		lastResponse: func(l stripe.ListContainer) *stripe.APIResponse {
			return l.(*stripe.PaymentIntentList).LastResponse
		},
		ident: func(pi *stripe.PaymentIntent) (string, map[string]string) { return pi.ID, pi.Metadata },
	}, func(pi *stripe.PaymentIntent) error {
		if mm := mismatch(pi, pl); mm != nil {
			return mm
		}
		switch {
		case effective(pi, confirm):
			if found == nil {
				found = pi
			}
		case pi.Status == stripe.PaymentIntentStatusProcessing:
			if settling == nil {
				settling = pi
			}
		case inert == nil:
			inert = pi
		}
		return nil
	})
	if err != nil {
		return providers.Result{}, false, err
	}
	switch {
	case found != nil:
		// The effect exists. (A mismatch further down an unfinished
		// listing would not undo it.)
		return providers.Result{ProviderRef: found.ID, HTTPStatus: status}, true, nil
	case settling != nil:
		return providers.Result{}, false, stillProcessing(settling)
	case !complete && inert != nil:
		return providers.Result{}, false, fmt.Errorf("%w: PaymentIntent %s carries this intent's key but is %s, and the listing stopped after %d pages of %d before its end",
			providers.ErrAbsenceNotProven, inert.ID, inert.Status, p.cfg.ReconcileMaxPages, p.pageSize)
	case !complete:
		return providers.Result{}, false, fmt.Errorf("%w: no PaymentIntent with this intent's namespace and key in the first %d pages of %d, and the listing goes on",
			providers.ErrAbsenceNotProven, p.cfg.ReconcileMaxPages, p.pageSize)
	case inert != nil:
		return providers.Result{}, false, p.noEffect(inert)
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

// classifyLookup turns a failed list, search or retrieve call into a
// *providers.LookupError: it proves nothing about the intent, whatever its
// status (a 404 for a PaymentIntent of another account or mode, a 400
// resource_missing, a 429 with Stripe-Should-Retry: false). Needs says
// what the look-up needs to answer.
func (p *Provider) classifyLookup(err error) *providers.LookupError {
	ae := p.classify(err)
	le := providers.AsLookupError(ae, "")
	le.Message = ae.Message
	if le.Code == CodeProviderAuth {
		le.Code = ""
		le.Message = ""
		if se := (*stripe.Error)(nil); errors.As(err, &se) {
			le.Message = p.scrub(se.Msg)
		}
	}
	switch {
	case le.HTTPStatus == http.StatusUnauthorized:
		le.Needs = "a valid Stripe secret key (Config.APIKey)"
	case le.HTTPStatus == http.StatusForbidden:
		le.Needs = "a Stripe key allowed to read PaymentIntents and refunds"
	case le.HTTPStatus == http.StatusNotFound || le.Code == string(stripe.ErrorCodeResourceMissing):
		le.Needs = "the Stripe account and mode (live or test) the intent's objects were made in"
	case le.HTTPStatus == http.StatusTooManyRequests:
		le.Needs = "fewer requests: Stripe's rate limit"
	case le.Refused():
		le.Needs = "a look-up Stripe accepts: " + le.Message
	}
	return le
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

// Redact returns a copy of payload, of any of the provider's kinds, for
// display: receipt_email keeps its
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
