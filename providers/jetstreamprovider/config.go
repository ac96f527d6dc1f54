package jetstreamprovider

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/outboxkit/outbox/internal/scrub"
)

const (
	// DefaultTimeout is Config.Timeout's default.
	DefaultTimeout = 10 * time.Second
	// DefaultReconnectWait is the delay between attempts to reconnect to
	// the server after the connection is lost.
	DefaultReconnectWait = 2 * time.Second
)

// ErrInvalidConfig is wrapped by every error New returns for a Config field
// that is wrong; the message names the field.
var ErrInvalidConfig = errors.New("jetstreamprovider: invalid config")

// ErrStreamLookup is wrapped by the error New returns when it must read
// Config.Stream's duplicate window and cannot: the server is unreachable,
// the stream does not exist, or JetStream is not enabled.
var ErrStreamLookup = errors.New("jetstreamprovider: cannot read the stream's duplicate window")

// Config configures a Provider.
type Config struct {
	// URL is the NATS server's URL, or several separated by commas
	// ("nats://user:pass@host:4222"). It may embed credentials: they are
	// never logged, never put in errors and masked when Config is printed.
	// Required.
	URL string

	// Stream is the JetStream stream that stores the subjects this provider
	// publishes to. When set, every publish expects it (a subject stored by
	// another stream fails, naming both), and unless KeyWindow is set New
	// reads its duplicate window, which becomes the key window: New then
	// needs the server reachable and fails with ErrStreamLookup otherwise.
	// Optional; without it and without KeyWindow the provider declares no
	// idempotency keys.
	Stream string

	// KeyWindow overrides the key window: the operator asserts that every
	// stream this provider publishes to keeps message ids at least this
	// long (its duplicate window). When set, New does not read any stream
	// and does not need the server reachable. Defaults to the duplicate
	// window of Stream.
	KeyWindow time.Duration

	// Timeout bounds how long Perform waits for the stream's PubAck (the
	// dispatcher's call timeout may cut it shorter), and how long New waits
	// to connect and read Stream. Defaults to DefaultTimeout.
	Timeout time.Duration

	// Options are extra nats.go connection options (TLS, a credentials
	// file, a user JWT). They are applied after the provider's own, so
	// they may override the connection name or the reconnect settings, but
	// should not re-enable the reconnect buffer: see the package doc.
	Options []nats.Option

	// Logger receives connection events and the warning about a missing
	// duplicate window. Defaults to discarding.
	Logger *slog.Logger
}

// String describes c with the credentials in URL masked.
func (c Config) String() string {
	return fmt.Sprintf("jetstreamprovider.Config{URL:%q Stream:%q KeyWindow:%s Timeout:%s}", RedactURL(c.URL), c.Stream, c.KeyWindow, c.Timeout)
}

// GoString is String, for the %#v verb.
func (c Config) GoString() string { return c.String() }

func (c Config) withDefaults() (Config, error) {
	out := c
	if strings.TrimSpace(out.URL) == "" {
		return out, fmt.Errorf("%w: Config.URL is required", ErrInvalidConfig)
	}
	for _, part := range strings.Split(out.URL, ",") {
		u, err := url.Parse(strings.TrimSpace(part))
		if err != nil || u.Host == "" {
			return out, fmt.Errorf("%w: Config.URL must be one or more server URLs such as nats://127.0.0.1:4222, separated by commas", ErrInvalidConfig)
		}
	}
	if out.Stream != "" && !validName(out.Stream) {
		return out, fmt.Errorf("%w: Config.Stream %q must not contain whitespace, '.', '*', '>', '/' or '\\'", ErrInvalidConfig, out.Stream)
	}
	if out.KeyWindow < 0 {
		return out, fmt.Errorf("%w: Config.KeyWindow must not be negative, got %s", ErrInvalidConfig, out.KeyWindow)
	}
	if out.Timeout < 0 {
		return out, fmt.Errorf("%w: Config.Timeout must not be negative, got %s", ErrInvalidConfig, out.Timeout)
	}
	if out.Timeout == 0 {
		out.Timeout = DefaultTimeout
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	return out, nil
}

// validName reports whether s is a valid JetStream stream or consumer name.
func validName(s string) bool {
	return s != "" && !strings.ContainsAny(s, " \t\r\n.*>/\\")
}

// RedactURL returns rawURL (one server URL or several separated by commas)
// with any user name, password or token removed, for logs and errors. A
// part it cannot parse becomes "[unparseable URL]".
func RedactURL(rawURL string) string { return scrub.URL(rawURL) }

func secretsIn(rawURL string) []string { return scrub.URLSecrets(rawURL) }

func scrubErr(err error, secrets []string) error { return scrub.Err(err, secrets...) }
