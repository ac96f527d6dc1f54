package providers

import (
	"context"
	"encoding/json"
	"time"
)

// Provider is an adapter for one external API. Implementations must be safe
// for concurrent use: the dispatcher calls Perform from many goroutines.
type Provider interface {
	// Name is the provider's stable name ("stripe"), stored with each intent.
	Name() string

	// Kinds lists the intent kinds this provider performs
	// ("stripe.payment_intent"). Kind names are global: two providers in one
	// Registry may not declare the same kind.
	Kinds() []string

	// Capabilities describes the provider's idempotency support.
	Capabilities() Capabilities

	// Validate checks a payload of the given kind when it is recorded. It
	// returns nil, a *PayloadError naming the offending field, or an error
	// wrapping ErrUnknownKind. It must not do I/O.
	Validate(kind string, payload json.RawMessage) error

	// Perform makes exactly one attempt at the effect described by req.
	// A nil error means the provider performed it. A non-nil error should be
	// (or wrap) an *AttemptError that classifies the attempt; any other error
	// is treated as OutcomeAmbiguous, the only safe assumption.
	//
	// Perform must pass req.IdempotencyKey to the provider when
	// Capabilities().IdempotencyKeys is true. When Capabilities().CanReconcile
	// is true it must carry the intent's identity in the request's metadata
	// (see [MetadataNamespace], [MetadataKey], [MetadataIntentID]), so that
	// Reconcile can find it and tell it from another deployment's object.
	// It must not retry by itself, and nothing below it (an SDK, net/http's
	// HTTP/2 client) may send the request twice: the dispatcher owns the
	// retry schedule.
	Perform(ctx context.Context, req Request) (Result, error)

	// Reconcile asks the provider whether it already performed req, looking
	// it up by the identity Perform put in the request's metadata: an object
	// belongs to req only if it carries both req.Namespace and
	// req.IdempotencyKey, and its essential parameters (amount, currency,
	// customer; recipient) match req.Payload.
	//
	//   - found=true, nil error: the effect exists; res names it.
	//   - found=false, nil error: absence is proven by a consistent read
	//     (Stripe's list endpoints, not its search). The dispatcher may then
	//     perform the intent again under a new key.
	//   - an error wrapping ErrAbsenceNotProven: nothing found, but the lookup
	//     proves nothing (an eventually consistent search, a bounded listing
	//     cut short, an intent recorded before namespaces existed). The
	//     intent stays in_doubt and is looked up again later.
	//   - a *MismatchError: an object carries the intent's identity but not
	//     its parameters. Never adopted; the intent stays in_doubt.
	//   - a *NotPerformedError: the intent's own object shows nothing was
	//     done (a declined PaymentIntent, a failed refund). The only error
	//     that settles the intent, as failed.
	//   - ErrReconcileUnsupported: the provider cannot be asked.
	//   - a *LookupError: the look-up itself was refused, rate limited or
	//     failed. It proves nothing; its Needs tells an operator what the
	//     look-up needs, its RetryAfter when to ask again.
	//
	// Any other error is a failed lookup too: the intent stays in_doubt and
	// is looked up again later. An *AttemptError is never an answer here:
	// what a look-up's HTTP status says is not what the request it looks for
	// did (see lookup.go).
	Reconcile(ctx context.Context, req Request) (res Result, found bool, err error)

	// Redact returns a copy of payload, for display, with secrets and personal
	// data masked. It never fails: a payload it cannot parse is replaced by a
	// placeholder.
	Redact(kind string, payload json.RawMessage) json.RawMessage
}

// Capabilities is what a provider declares about idempotency.
type Capabilities struct {
	// IdempotencyKeys is true when the provider accepts a key and answers a
	// repeated request with the first request's result (Stripe's
	// Idempotency-Key). When false the dispatcher commits a write-ahead
	// attempt before every call and never repeats an ambiguous one.
	IdempotencyKeys bool

	// KeyWindow is how long the provider remembers a key. Past it a repeat is
	// executed afresh, so the dispatcher treats an earlier, possibly
	// performed, attempt as ambiguous instead of repeating it. Required when
	// IdempotencyKeys is true.
	KeyWindow time.Duration

	// MaxKeyLength is the longest key the provider accepts, in bytes; 0 means
	// no limit. Keys are checked at record time.
	MaxKeyLength int

	// CanReconcile is true when Reconcile can look an intent up.
	CanReconcile bool
}

// The metadata keys (Stripe metadata, SendGrid custom_args) under which
// adapters that reconcile carry an intent's identity. Namespace and key
// together identify the intent; the intent id is only for people reading
// the provider's dashboard (row ids repeat across databases).
const (
	MetadataNamespace = "outbox_namespace"
	MetadataKey       = "outbox_key"
	MetadataIntentID  = "intent_id"
)

// Request is one attempt at an intent.
type Request struct {
	// IntentID is the outbox's id for the intent, for display only: two
	// databases have the same ids, so it never identifies an object at the
	// provider.
	IntentID int64
	// Namespace tells this deployment's database from any other sharing the
	// provider account (generated by the first migration, see
	// migrations/003). Empty for an intent recorded before namespaces
	// existed: such an intent's objects carry no namespace, and Reconcile
	// cannot prove their absence.
	Namespace string
	// IdempotencyKey is the key for the provider: derived from the
	// namespace, the intent's key and its key generation, and within the
	// provider's MaxKeyLength. It is the same on every attempt until an
	// absence proven by Reconcile moves the intent to a new generation.
	IdempotencyKey string
	// KeyFirstUsedAt is when the first attempt under IdempotencyKey was
	// claimed, by the dispatcher's clock (zero before the first attempt).
	// No object for this key can be older, so Reconcile may list from it
	// (less a margin for clock skew).
	KeyFirstUsedAt time.Time
	// Kind is one of the provider's Kinds.
	Kind string
	// Payload was accepted by Validate when the intent was recorded.
	Payload json.RawMessage
	// Attempt counts attempts at this intent, starting at 1.
	Attempt int
}

// Result describes an effect the provider performed.
type Result struct {
	// ProviderRef is the provider's id for the effect (a PaymentIntent id,
	// an X-Message-Id).
	ProviderRef string
	// HTTPStatus is the status of the response, when there was one.
	HTTPStatus int
	// Replayed is true when the provider answered from its idempotency store
	// instead of acting again (Stripe's Idempotent-Replayed: true).
	Replayed bool
}

// Filler is implemented by a provider whose payload fields may be filled at
// dispatch from the result of an intent recorded before (intents.After's
// Fill: a refund's payment_intent from its charge's provider reference).
// FillPlaceholder returns a value of the form such a field takes (for
// Stripe's payment_intent, a "pi_..." id), which Validate accepts in its
// place when the intent is recorded, so the rest of the payload is
// validated as usual; false when field cannot be filled. A provider that
// does not implement Filler is validated with the JSON string
// FillPlaceholder in each filled field.
type Filler interface {
	FillPlaceholder(kind, field string) (json.RawMessage, bool)
}

// FillPlaceholder is what a filled field holds while its payload is
// validated, for a provider that is not a Filler.
const FillPlaceholder = "filled-at-dispatch"

// Configured is implemented by a provider that can say, without I/O,
// whether it can perform its intents: an adapter built without credentials
// can validate and redact (all recording needs) but every attempt would
// fail. dispatcher.New refuses a registry holding one that is not
// configured, instead of failing every intent it would attempt.
type Configured interface {
	// CheckConfigured returns nil, or an error naming what is missing
	// (the Config field).
	CheckConfigured() error
}
