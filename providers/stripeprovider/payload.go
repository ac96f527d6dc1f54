package stripeprovider

import (
	"encoding/json"
	"fmt"
	"net/mail"
	"regexp"
	"strings"

	"github.com/outboxkit/outbox/providers"
)

// PaymentIntentPayload is the JSON payload of a KindPaymentIntent intent.
// Unknown fields are refused. An intents.Intent takes it as its Payload,
// as it is. Its optional scalars are pointers, so that a value not given
// stays apart from a zero one (confirm=false is sent to Stripe when given,
// and an off_session given without confirm is refused); Go's new takes
// the value, with no variable or helper:
//
//	stripeprovider.PaymentIntentPayload{Amount: new(int64(500)), Currency: new("usd"),
//		Customer: "cus_42", PaymentMethod: "pm_card_visa", Confirm: new(true)}
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
