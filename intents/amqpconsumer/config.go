package amqpconsumer

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxkit/outbox/intents"
)

// Defaults for Config's fields.
const (
	// DefaultPrefetch is Config.Prefetch's default.
	DefaultPrefetch = 10
	// DefaultConcurrency is Config.Concurrency's default.
	DefaultConcurrency = 4
	// DefaultMaxDeliver is Config.MaxDeliver's default.
	DefaultMaxDeliver = 5
	// NoDeliverLimit, as Config.MaxDeliver, retries a message whose
	// handler fails forever and never dead-letters it for that reason.
	NoDeliverLimit = -1
	// DefaultMessageIDHeader is Config.MessageIDHeader's default.
	DefaultMessageIDHeader = "x-message-id"
	// DefaultReconnectDelay is Config.ReconnectDelay's default.
	DefaultReconnectDelay = 500 * time.Millisecond
	// DefaultReconnectDelayMax is Config.ReconnectDelayMax's default.
	DefaultReconnectDelayMax = 30 * time.Second
	// DefaultShutdownGrace is Config.ShutdownGrace's default.
	DefaultShutdownGrace = 30 * time.Second
	// DefaultPublishTimeout is Config.PublishTimeout's default.
	DefaultPublishTimeout = 10 * time.Second
)

// Handler handles one message inside the inbox transaction that
// intents.Client.Consume opens: it reads d.Body, writes through tx and
// records intents with rec. It must not commit or roll back tx, call
// external systems, or acknowledge d (d's Acknowledger refuses: the
// consumer acknowledges after the commit). Returning an error (a malformed
// body included) rolls everything back and counts as a failed delivery
// toward Config.MaxDeliver.
//
// Consume runs the handler again, in a fresh transaction, when Postgres
// reports a transient error; so may a redelivery after a crash. A handler
// that only writes through tx is safe.
type Handler func(ctx context.Context, d amqp.Delivery, tx pgx.Tx, rec *intents.Recorder) error

// Config configures a Consumer.
type Config struct {
	// URL is the broker's AMQP URI, "amqp://user:password@host:5672/vhost"
	// (or amqps://). Required. It holds a secret: logs show it with the
	// password masked and errors never quote it.
	URL string
	// Queue is the queue to consume. It must exist: the consumer declares
	// nothing (topology is the application's); while it is missing the
	// consumer logs and retries as for a broker that is down. Required.
	Queue string
	// Consumer is the intents consumer name, part of the processed marker
	// and of every idempotency key ("billing"): 1 to
	// intents.MaxConsumerLength letters, digits, '_', '.' or '-'.
	// Required.
	Consumer string
	// Handler handles each message. Required.
	Handler Handler
	// Prefetch is the most unacknowledged messages the broker sends ahead
	// (basic.qos). Defaults to DefaultPrefetch.
	Prefetch int
	// Concurrency is how many messages are handled at once. Defaults to
	// DefaultConcurrency.
	Concurrency int
	// MaxDeliver is how many times a message is delivered to a handler
	// that fails before it is dead-lettered: the handler runs at most
	// MaxDeliver times per message (as JetStream's MaxDeliver). Defaults
	// to DefaultMaxDeliver; NoDeliverLimit never dead-letters for handler
	// errors.
	MaxDeliver int
	// DeadLetterExchange receives messages that exhausted MaxDeliver
	// and messages refused for having no usable id, published with their
	// original routing key, body and properties plus HeaderDeadLetterReason
	// and the other x-outbox-* headers. It must exist and route somewhere
	// (a dead-letter queue bound to it): until it does, such messages are
	// requeued. Required unless MaxDeliver is NoDeliverLimit;
	// without it a message with no id is rejected without requeue (the
	// queue's own x-dead-letter-exchange policy, if any, then applies).
	DeadLetterExchange string
	// MessageIDHeader is the header whose string value is the message id
	// when the AMQP message-id property is empty. Defaults to
	// DefaultMessageIDHeader.
	MessageIDHeader string
	// ReconnectDelay is the first wait before reconnecting after the
	// broker was unreachable or the connection was lost; each failure in a
	// row doubles it (with ±20% jitter) up to ReconnectDelayMax. It is
	// also the pause before requeueing a message whose transaction failed
	// outside the handler (the database unreachable). Defaults to
	// DefaultReconnectDelay.
	ReconnectDelay time.Duration
	// ReconnectDelayMax caps the reconnect wait. Defaults to
	// DefaultReconnectDelayMax.
	ReconnectDelayMax time.Duration
	// ShutdownGrace is how long handlers in flight when Run's ctx ends may
	// take to finish before their context is cancelled (which rolls their
	// transaction back; the broker then redelivers). Defaults to
	// DefaultShutdownGrace.
	ShutdownGrace time.Duration
	// PublishTimeout bounds the wait for the broker's confirm when the
	// consumer republishes a failed message or dead-letters one. Defaults
	// to DefaultPublishTimeout.
	PublishTimeout time.Duration
	// AMQPConfig tunes the connection: TLS, heartbeat, client properties,
	// a custom Dial. Optional; its Recovery must be nil (the consumer
	// reconnects by itself).
	AMQPConfig *amqp.Config
	// Logger receives connection events and per-message problems.
	// Defaults to slog.Default(); slog.New(slog.DiscardHandler) discards.
	Logger *slog.Logger
}

var consumerNamePattern = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

func (c Config) withDefaults() (Config, error) {
	switch {
	case c.URL == "":
		return c, invalid("Config.URL is required")
	case c.Queue == "":
		return c, invalid("Config.Queue is required")
	case c.Handler == nil:
		return c, invalid("Config.Handler is required")
	case c.Consumer == "" || len(c.Consumer) > intents.MaxConsumerLength || !consumerNamePattern.MatchString(c.Consumer):
		return c, invalid("Config.Consumer must be 1 to %d letters, digits, '_', '.' or '-', got %q", intents.MaxConsumerLength, c.Consumer)
	}
	if _, err := amqp.ParseURI(c.URL); err != nil {
		// ParseURI's errors can quote the URL, password included.
		return c, invalid("Config.URL is not a valid AMQP URI (amqp://user:password@host:port/vhost)")
	}
	ints := []struct {
		name string
		v    *int
		def  int
	}{{"Prefetch", &c.Prefetch, DefaultPrefetch}, {"Concurrency", &c.Concurrency, DefaultConcurrency}}
	for _, f := range ints {
		if *f.v < 0 {
			return c, invalid("Config.%s must be positive, got %d", f.name, *f.v)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	switch {
	case c.MaxDeliver == 0:
		c.MaxDeliver = DefaultMaxDeliver
	case c.MaxDeliver < NoDeliverLimit:
		return c, invalid("Config.MaxDeliver must be positive or NoDeliverLimit, got %d", c.MaxDeliver)
	}
	if c.DeadLetterExchange == "" && c.MaxDeliver != NoDeliverLimit {
		return c, invalid("Config.DeadLetterExchange is required unless MaxDeliver is NoDeliverLimit")
	}
	if c.MessageIDHeader == "" {
		c.MessageIDHeader = DefaultMessageIDHeader
	}
	durations := []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"ReconnectDelay", &c.ReconnectDelay, DefaultReconnectDelay},
		{"ReconnectDelayMax", &c.ReconnectDelayMax, DefaultReconnectDelayMax},
		{"ShutdownGrace", &c.ShutdownGrace, DefaultShutdownGrace},
		{"PublishTimeout", &c.PublishTimeout, DefaultPublishTimeout},
	}
	for _, f := range durations {
		if *f.v < 0 {
			return c, invalid("Config.%s must be positive, got %s", f.name, *f.v)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	if c.ReconnectDelayMax < c.ReconnectDelay {
		return c, invalid("Config.ReconnectDelayMax (%s) is less than ReconnectDelay (%s)", c.ReconnectDelayMax, c.ReconnectDelay)
	}
	if c.AMQPConfig != nil && c.AMQPConfig.Recovery != nil {
		return c, invalid("Config.AMQPConfig.Recovery must be nil: the consumer reconnects by itself")
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// invalid is an error wrapping ErrInvalidConfig; the message names the field.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
}
