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
	// Capabilities().IdempotencyKeys is true, and must put req.IntentID in the
	// request's metadata when Capabilities().CanReconcile is true, so that
	// Reconcile can find it. It must not retry by itself: the dispatcher owns
	// the retry schedule.
	Perform(ctx context.Context, req Request) (Result, error)

	// Reconcile asks the provider whether it already performed req, looking
	// it up by the intent id Perform put in the request's metadata. It returns
	// found=true with the provider's reference when the effect exists, and
	// found=false with a nil error when the provider says it has no trace.
	// Providers that cannot be asked return ErrReconcileUnsupported.
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

// Request is one attempt at an intent.
type Request struct {
	// IntentID is the outbox's id for the intent; adapters carry it in the
	// provider's metadata (Stripe metadata, SendGrid custom_args).
	IntentID int64
	// IdempotencyKey is the intent's stable key, the same on every attempt.
	IdempotencyKey string
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
