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
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	stripe "github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/client"

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

func (p *Provider) scrub(s string) string {
	if p.cfg.APIKey == "" {
		return s
	}
	return strings.ReplaceAll(s, p.cfg.APIKey, "[redacted]")
}
