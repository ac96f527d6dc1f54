package intents

import (
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxkit/outbox/internal/intentstore"
	"github.com/outboxkit/outbox/internal/tracing"

	"github.com/outboxkit/outbox/providers"
)

const (
	// DefaultMaxPayloadBytes is Config.MaxPayloadBytes's default: 64 KiB.
	DefaultMaxPayloadBytes = 64 << 10
	// DefaultMaxTxAttempts is Config.MaxTxAttempts's default.
	DefaultMaxTxAttempts = 5
	// DefaultTxRetryDelay is Config.TxRetryDelay's default.
	DefaultTxRetryDelay = 20 * time.Millisecond
	// DefaultNotifyCooldown is Config.NotifyCooldown's default.
	DefaultNotifyCooldown = 5 * time.Millisecond
)

// Config configures a Client.
type Config struct {
	// Providers validates every recorded intent: its kind must belong to a
	// registered provider and its payload must pass that provider's
	// validation. Required.
	Providers *providers.Registry

	// MaxPayloadBytes bounds an intent's payload, as JSON: a larger one is
	// refused when recorded with an *IntentError wrapping
	// ErrPayloadTooLarge, and nothing of the transaction's intents is
	// written. It bounds what a payload carries inline, a SendGrid
	// email's attachments included (a provider's own request limit, such
	// as SendGrid's 30 MB, applies within it). 'outboxd run' and 'outboxd
	// record' set it with --max-payload-bytes. Defaults to
	// DefaultMaxPayloadBytes.
	MaxPayloadBytes int

	// MaxTxAttempts bounds how many times Consume runs its whole transaction
	// when Postgres reports a transient error (serialization failure,
	// deadlock, a connection lost before commit). Each run calls the handler
	// again. Defaults to DefaultMaxTxAttempts; 1 disables retries.
	MaxTxAttempts int

	// TxRetryDelay is the first delay between transaction attempts; it
	// doubles each time, with jitter. Defaults to DefaultTxRetryDelay.
	TxRetryDelay time.Duration

	// NotifyCooldown is the shortest time between two notifications this
	// client sends (a Postgres NOTIFY on the queue's channel,
	// intentstore.QueueChannel, inside the recording transaction) to wake
	// dispatchers when it records intents. A notified dispatcher claims the
	// new intents at once, and keeps claiming FetchCooldown apart while its
	// claims find any, so intents committed between two notifications are
	// claimed with the ones before them; after a quiet spell they wait for
	// the next notification or the dispatcher's poll (FetchPollInterval).
	// Lower means lower latency from commit to dispatch; each notification
	// costs a NOTIFY, which briefly serialises commits. Defaults to
	// DefaultNotifyCooldown (River's own inserts use its FetchCooldown,
	// 100ms).
	NotifyCooldown time.Duration

	// Logger receives retry warnings. Defaults to slog.Default();
	// slog.New(slog.DiscardHandler) discards.
	Logger *slog.Logger

	// TracerProvider traces consuming: Consume, ConsumeTx and each message
	// of ConsumeBatch run in an "outbox.consume" span, and every intent
	// stores the W3C trace context it was recorded under (that span's, or
	// for RecordTx the caller's span in ctx), so the dispatcher's attempt
	// spans link to it. Nil uses OpenTelemetry's no-op provider, not the
	// global one: no spans are recorded, but a span context already in ctx
	// (a caller's, or one a broker consumer took from the message's
	// traceparent header) is still stored with the intents.
	TracerProvider trace.TracerProvider
}

func (c *Config) withDefaults() (*Config, error) {
	if c == nil {
		return nil, errors.New("intents: Config is required (it must name the providers)")
	}
	out := *c
	if out.Providers == nil {
		return nil, errors.New("intents: Config.Providers is required")
	}
	if out.MaxPayloadBytes == 0 {
		out.MaxPayloadBytes = DefaultMaxPayloadBytes
	}
	if out.MaxPayloadBytes < 0 {
		return nil, fmt.Errorf("intents: Config.MaxPayloadBytes must be positive, got %d", out.MaxPayloadBytes)
	}
	if out.MaxTxAttempts == 0 {
		out.MaxTxAttempts = DefaultMaxTxAttempts
	}
	if out.MaxTxAttempts < 0 {
		return nil, fmt.Errorf("intents: Config.MaxTxAttempts must be positive, got %d", out.MaxTxAttempts)
	}
	if out.TxRetryDelay == 0 {
		out.TxRetryDelay = DefaultTxRetryDelay
	}
	if out.TxRetryDelay < 0 {
		return nil, fmt.Errorf("intents: Config.TxRetryDelay must be positive, got %s", out.TxRetryDelay)
	}
	if out.NotifyCooldown == 0 {
		out.NotifyCooldown = DefaultNotifyCooldown
	}
	if out.NotifyCooldown < 0 {
		return nil, fmt.Errorf("intents: Config.NotifyCooldown must be positive, got %s", out.NotifyCooldown)
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	return &out, nil
}

// Client records intents. It is safe for concurrent use.
type Client struct {
	pool   *pgxpool.Pool
	config *Config
	// store writes the rows: markers, intents, events, dispatch jobs.
	store *intentstore.Store
	// schemaOK: the schema was found current (checkSchema).
	schemaOK atomic.Bool
	tracer   trace.Tracer
}

// NewClient returns a Client that records intents in the database behind
// pool, which must have been migrated (outboxd migrate).
func NewClient(pool *pgxpool.Pool, config *Config) (*Client, error) {
	if pool == nil {
		return nil, errors.New("intents: pool is required")
	}
	cfg, err := config.withDefaults()
	if err != nil {
		return nil, err
	}
	store, err := intentstore.New(pool, &intentstore.Config{NotifyCooldown: cfg.NotifyCooldown})
	if err != nil {
		return nil, err
	}
	return &Client{pool: pool, config: cfg, store: store, tracer: tracing.Tracer(cfg.TracerProvider)}, nil
}
