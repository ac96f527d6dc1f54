package jetstreamconsumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/internal/scrub"
)

// Defaults for Config.
const (
	// DefaultMaxDeliver is Config.MaxDeliver's default.
	DefaultMaxDeliver = 5
	// DefaultAckWait is Config.AckWait's default.
	DefaultAckWait = 30 * time.Second
	// DefaultConcurrency is Config.Concurrency's default.
	DefaultConcurrency = 4
	// DefaultRedeliveryDelay is Config.RedeliveryDelay's default.
	DefaultRedeliveryDelay = time.Second
	// DefaultRedeliveryDelayMax is Config.RedeliveryDelayMax's default.
	DefaultRedeliveryDelayMax = time.Minute
	// DefaultReconnectDelay is Config.ReconnectDelay's default.
	DefaultReconnectDelay = 500 * time.Millisecond
	// DefaultReconnectDelayMax is Config.ReconnectDelayMax's default.
	DefaultReconnectDelayMax = 30 * time.Second
	// DefaultAckTimeout is Config.AckTimeout's default.
	DefaultAckTimeout = 5 * time.Second
)

// ErrInvalidConfig is wrapped by every error New returns for a Config field
// that is wrong; the message names the field.
var ErrInvalidConfig = errors.New("jetstreamconsumer: invalid config")

// Handler handles one JetStream message inside the Consume transaction: it
// makes its own writes through tx and records intents with rec. It must not
// commit or roll back tx, call external systems, or acknowledge msg: Run
// acknowledges after the commit. Returning an error rolls everything back
// and the message is redelivered (see the package doc). Like any
// intents.Handler it may run more than once for one delivery when Postgres
// reports a transient error; each earlier run was rolled back.
type Handler func(ctx context.Context, msg jetstream.Msg, tx pgx.Tx, rec *intents.Recorder) error

// Config configures a Consumer.
type Config struct {
	// URL is the NATS server's URL, or several separated by commas. It may
	// embed credentials; they are never logged. Required.
	URL string
	// Stream is the JetStream stream to consume. It must exist: Run retries
	// until it does. Required.
	Stream string
	// Durable is the durable consumer's name on the server, created or
	// updated by Run. Several processes with the same Durable share its
	// messages. Required.
	Durable string
	// Consumer is the intents consumer name: the processed markers and the
	// idempotency keys of recorded intents carry it. Letters, digits, '_',
	// '.' or '-', at most intents.MaxConsumerLength. Defaults to Durable.
	// Changing it makes every message new again.
	Consumer string
	// FilterSubject restricts the consumer to the stream's messages on this
	// subject (wildcards allowed). Defaults to every message of the stream.
	FilterSubject string
	// Handler handles each message. Required.
	Handler Handler
	// MaxDeliver is how many times a message is delivered before it is
	// given up (terminated, logged). Defaults to DefaultMaxDeliver.
	MaxDeliver int
	// AckWait is how long JetStream waits for an ack before it redelivers
	// a message; it also bounds a handler's run. Defaults to DefaultAckWait.
	AckWait time.Duration
	// Concurrency is how many messages are handled at once. Defaults to
	// DefaultConcurrency.
	Concurrency int
	// Batch is how many messages are fetched ahead and buffered. Defaults
	// to Concurrency.
	Batch int
	// RedeliveryDelay is how long after a handler error the message is
	// redelivered the first time; the delay doubles with each delivery up
	// to RedeliveryDelayMax. Defaults to DefaultRedeliveryDelay and
	// DefaultRedeliveryDelayMax.
	RedeliveryDelay, RedeliveryDelayMax time.Duration
	// ReconnectDelay is the first delay before connecting again after the
	// server could not be reached or the consumer could not be set up; it
	// doubles up to ReconnectDelayMax. Defaults to DefaultReconnectDelay and
	// DefaultReconnectDelayMax.
	ReconnectDelay, ReconnectDelayMax time.Duration
	// AckTimeout bounds the wait for the server's confirmation of an ack.
	// Defaults to DefaultAckTimeout.
	AckTimeout time.Duration
	// Options are extra nats.go connection options (TLS, a credentials
	// file), applied after the consumer's own.
	Options []nats.Option
	// Logger receives connection events, refused and given-up messages.
	// Defaults to slog.Default(); slog.New(slog.DiscardHandler) discards.
	Logger *slog.Logger
}

// String describes c with the credentials in URL masked.
func (c Config) String() string {
	return fmt.Sprintf("jetstreamconsumer.Config{URL:%q Stream:%q Durable:%q Consumer:%q FilterSubject:%q MaxDeliver:%d AckWait:%s Concurrency:%d}",
		redactURL(c.URL), c.Stream, c.Durable, c.Consumer, c.FilterSubject, c.MaxDeliver, c.AckWait, c.Concurrency)
}

// GoString is String, for the %#v verb.
func (c Config) GoString() string { return c.String() }

var consumerNamePattern = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

func (c *Config) withDefaults() (*Config, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: Config is required", ErrInvalidConfig)
	}
	out := *c
	for _, step := range []func() error{out.checkNames, out.defaultCounts, out.defaultDurations} {
		if err := step(); err != nil {
			return nil, err
		}
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	return &out, nil
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
}

// checkNames checks what names the server, the stream, the consumers and
// the handler.
func (c *Config) checkNames() error {
	if strings.TrimSpace(c.URL) == "" {
		return invalid("Config.URL is required")
	}
	for _, part := range strings.Split(c.URL, ",") {
		if u, err := url.Parse(strings.TrimSpace(part)); err != nil || u.Host == "" {
			return invalid("Config.URL must be one or more server URLs such as nats://127.0.0.1:4222, separated by commas")
		}
	}
	if !validName(c.Stream) {
		return invalid("Config.Stream %q is required and must not contain whitespace, '.', '*', '>', '/' or '\\'", c.Stream)
	}
	if !validName(c.Durable) {
		return invalid("Config.Durable %q is required and must not contain whitespace, '.', '*', '>', '/' or '\\'", c.Durable)
	}
	if c.Consumer == "" {
		c.Consumer = c.Durable
	}
	if len(c.Consumer) > intents.MaxConsumerLength || !consumerNamePattern.MatchString(c.Consumer) {
		return invalid("Config.Consumer %q (defaulting to Durable) must be 1 to %d letters, digits, '_', '.' or '-'", c.Consumer, intents.MaxConsumerLength)
	}
	if strings.IndexFunc(c.FilterSubject, func(r rune) bool { return r <= ' ' }) >= 0 {
		return invalid("Config.FilterSubject %q must not contain whitespace", c.FilterSubject)
	}
	if c.Handler == nil {
		return invalid("Config.Handler is required")
	}
	return nil
}

// defaultCounts fills MaxDeliver, Concurrency and Batch (one fetch fills
// every worker) when zero.
func (c *Config) defaultCounts() error {
	ints := []struct {
		name string
		v    *int
		def  int
	}{{"MaxDeliver", &c.MaxDeliver, DefaultMaxDeliver}, {"Concurrency", &c.Concurrency, DefaultConcurrency}}
	for _, f := range ints {
		if *f.v < 0 {
			return invalid("Config.%s must be positive, got %d", f.name, *f.v)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	if c.Batch < 0 {
		return invalid("Config.Batch must be positive, got %d", c.Batch)
	}
	if c.Batch == 0 {
		c.Batch = c.Concurrency
	}
	return nil
}

func (c *Config) defaultDurations() error {
	durations := []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"AckWait", &c.AckWait, DefaultAckWait},
		{"RedeliveryDelay", &c.RedeliveryDelay, DefaultRedeliveryDelay},
		{"RedeliveryDelayMax", &c.RedeliveryDelayMax, DefaultRedeliveryDelayMax},
		{"ReconnectDelay", &c.ReconnectDelay, DefaultReconnectDelay},
		{"ReconnectDelayMax", &c.ReconnectDelayMax, DefaultReconnectDelayMax},
		{"AckTimeout", &c.AckTimeout, DefaultAckTimeout},
	}
	for _, f := range durations {
		if *f.v < 0 {
			return invalid("Config.%s must be positive, got %s", f.name, *f.v)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	if c.RedeliveryDelayMax < c.RedeliveryDelay {
		return invalid("Config.RedeliveryDelayMax (%s) is less than Config.RedeliveryDelay (%s)", c.RedeliveryDelayMax, c.RedeliveryDelay)
	}
	if c.ReconnectDelayMax < c.ReconnectDelay {
		return invalid("Config.ReconnectDelayMax (%s) is less than Config.ReconnectDelay (%s)", c.ReconnectDelayMax, c.ReconnectDelay)
	}
	return nil
}

// validName reports whether s is a valid JetStream stream or consumer name.
func validName(s string) bool {
	return s != "" && !strings.ContainsAny(s, " \t\r\n.*>/\\")
}

func redactURL(rawURL string) string { return scrub.URL(rawURL) }

func secretsIn(rawURL string) []string { return scrub.URLSecrets(rawURL) }

func scrubErr(err error, secrets []string) error { return scrub.Err(err, secrets...) }
