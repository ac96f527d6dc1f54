package adminhttp

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"

	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/intents/audit"
)

// Defaults and limits.
const (
	// DefaultAddr is the address a Server listens on when Config.Addr is
	// empty: loopback only, so no token is needed.
	DefaultAddr = "127.0.0.1:8080"
	// DefaultSessionTTL is how long a dashboard session lasts.
	DefaultSessionTTL = 12 * time.Hour
	// DefaultReadinessTimeout bounds the database checks of /readyz.
	DefaultReadinessTimeout = 5 * time.Second
	// MinTokenLength is the shortest Config.Token accepted, in bytes.
	MinTokenLength = 16
	// DefaultMaxBodyBytes is Config.MaxBodyBytes's default: a message of
	// intents at intents.DefaultMaxPayloadBytes (ingest.MaxMessageBytes).
	DefaultMaxBodyBytes = 1 << 20
	// MaxBodyBytesLimit bounds Config.MaxBodyBytes, so that the bodies read
	// at once (MaxConcurrentBodies) hold at most 64 MiB.
	MaxBodyBytesLimit = 8 << 20
	// MaxConcurrentBodies bounds the request bodies read at once, so that
	// what the handler holds for them stays bounded whatever the clients
	// send (MaxConcurrentBodies times MaxBodyBytes and their decoding); a
	// request that finds them all taken for BodyWait is answered 503 with
	// Retry-After.
	MaxConcurrentBodies = 8
	// BodyWait is how long a request waits for one of MaxConcurrentBodies.
	BodyWait = 5 * time.Second
	// RiverUIPath is where River's UI is mounted, under Config.Prefix.
	RiverUIPath = "/riverui"
)

// ErrInvalidConfig is wrapped by every *ConfigError.
var ErrInvalidConfig = errors.New("invalid admin handler config")

// ConfigError names the Config field that is wrong.
type ConfigError struct {
	Field  string
	Reason string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("adminhttp: Config.%s: %s", e.Field, e.Reason)
}

// Unwrap returns ErrInvalidConfig.
func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }

// RecordObserver is told, after the transaction committed, how many
// intents of each kind a message posted to /api/v1/messages recorded
// (never for a duplicate). *metrics.Metrics (dispatcher/metrics)
// implements it. It must be safe for concurrent use and must not block.
type RecordObserver interface {
	IntentsRecorded(kind string, n int)
}

// Config configures a Handler (NewHandler) or a Server (New). NewHandler
// validates it once; nothing in it is read again but through the Handler.
type Config struct {
	// Version is the running program's version, shown in every page's
	// header beside the database and the namespace, so an operator knows
	// which deployment the dashboard is of. Optional.
	Version string
	// Prefix is the path the handler is mounted at ("/outbox"): every
	// route, link and redirect is under it, the session cookie is scoped
	// to it, and requests reach the handler with their whole path (mount
	// it with mux.Handle(Prefix+"/", h), not through http.StripPrefix).
	// It must begin with "/", not end with one, and hold only letters,
	// digits and "-._~/". Defaults to "" (the root).
	Prefix string
	// Addr is the TCP address the handler is served on ("127.0.0.1:8080",
	// ":9090"): the address a Server listens on, or the one your own
	// server listens on for a Handler mounted in it. It decides whether
	// Token is required. A Server defaults it to DefaultAddr and accepts
	// a port of 0 (Server.Addr tells which port); NewHandler has no
	// default: without a Token, say here the loopback address your server
	// listens on.
	Addr string
	// Token is the shared secret API clients and operators present.
	// Required unless Addr is a loopback address (127.0.0.0/8, ::1,
	// localhost); at least MinTokenLength bytes when set. Never logged
	// or rendered.
	Token string
	// TokenSource says where an operator finds the token ("the
	// OUTBOXD_ADMIN_TOKEN environment variable"), for the sign-in page.
	// Optional.
	TokenSource string
	// Audit lists, shows and acts on intents. Required.
	Audit *audit.Store
	// Intents records the messages posted to /api/v1/messages, as
	// intents.Client.Consume does. Required.
	Intents *intents.Client
	// Observer is told what /api/v1/messages recorded. Optional.
	Observer RecordObserver
	// UnknownKindHint, when set, ends the API's error about an intent kind
	// no registered provider performs (outboxd names the --providers flag
	// that enables it). Optional.
	UnknownKindHint func(kind string) string
	// MaxBodyBytes bounds a request body; a larger one is refused with 413.
	// Set it from the payload limit the Intents client was given
	// (ingest.MaxMessageBytes) when that limit was raised. Defaults to
	// DefaultMaxBodyBytes; at most MaxBodyBytesLimit.
	MaxBodyBytes int
	// Pool is the outbox database, checked by /readyz, read by River's UI,
	// and holding the dashboard's sessions (outbox_admin_sessions).
	// Required.
	Pool *pgxpool.Pool
	// Gatherer is served at /metrics. Defaults to an empty registry.
	Gatherer prometheus.Gatherer
	// RiverClient backs River's UI at /riverui/. Defaults to an insert-only
	// client on Pool (it works no jobs).
	RiverClient *river.Client[pgx.Tx]
	// DisableRiverUI leaves /riverui/ unmounted (404).
	DisableRiverUI bool
	// SessionTTL is how long a dashboard sign-in lasts. Defaults to
	// DefaultSessionTTL.
	SessionTTL time.Duration
	// TLSTerminated says that browsers reach the handler over HTTPS through
	// a proxy that terminates TLS in front of it, so the session cookie is
	// marked Secure even though requests arrive over plain HTTP. Without
	// it, the cookie is Secure only on a request that came over TLS.
	TLSTerminated bool
	// Logger receives request errors, operator actions and sign-in
	// failures, never a secret. Defaults to slog.Default().
	Logger *slog.Logger
	// Now is the clock, for session expiry and the pages' ages. Defaults
	// to time.Now.
	Now func() time.Time
}

// IsLoopback reports whether addr ("host:port", or a bare host) listens on
// loopback only: a 127.0.0.0/8 or ::1 address, or "localhost". An empty host
// (all interfaces) is not loopback.
func IsLoopback(addr string) bool {
	host := addr
	if h, _, err := net.SplitHostPort(addr); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// validate checks c and fills its defaults; its errors are *ConfigError.
func (c Config) validate() (Config, error) {
	if err := c.checkAccess(); err != nil {
		return c, err
	}
	for _, required := range []struct {
		field   string
		missing bool
	}{{"Audit", c.Audit == nil}, {"Intents", c.Intents == nil}, {"Pool", c.Pool == nil}} {
		if required.missing {
			return c, &ConfigError{Field: required.field, Reason: "is required"}
		}
	}
	switch {
	case c.MaxBodyBytes == 0:
		c.MaxBodyBytes = DefaultMaxBodyBytes
	case c.MaxBodyBytes < 0 || c.MaxBodyBytes > MaxBodyBytesLimit:
		return c, &ConfigError{Field: "MaxBodyBytes", Reason: fmt.Sprintf("must be between 1 and %d, got %d", MaxBodyBytesLimit, c.MaxBodyBytes)}
	}
	if c.SessionTTL < 0 {
		return c, &ConfigError{Field: "SessionTTL", Reason: "must not be negative"}
	}
	if c.SessionTTL == 0 {
		c.SessionTTL = DefaultSessionTTL
	}
	if c.Gatherer == nil {
		c.Gatherer = prometheus.NewRegistry()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c, nil
}

// checkAccess checks Prefix, Addr and Token: who may reach the handler,
// and where.
func (c Config) checkAccess() error {
	if c.Prefix != "" && (!strings.HasPrefix(c.Prefix, "/") || strings.HasSuffix(c.Prefix, "/") ||
		strings.Contains(c.Prefix, "//") || strings.Trim(c.Prefix, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~/") != "") {
		return &ConfigError{Field: "Prefix", Reason: fmt.Sprintf("%q is not a path like \"/outbox\" (a leading \"/\", no trailing one, only letters, digits and \"-._~/\")", c.Prefix)}
	}
	if c.Addr != "" {
		if _, _, err := net.SplitHostPort(c.Addr); err != nil {
			return &ConfigError{Field: "Addr", Reason: fmt.Sprintf("%q is not host:port: %v", c.Addr, err)}
		}
	}
	switch {
	case c.Token == "" && c.Addr == "":
		return &ConfigError{Field: "Token", Reason: "required, unless Addr names the loopback address the handler is served on"}
	case c.Token == "" && !IsLoopback(c.Addr):
		return &ConfigError{Field: "Token", Reason: fmt.Sprintf("required when serving on %s, which is not a loopback address", c.Addr)}
	case c.Token != "" && len(c.Token) < MinTokenLength:
		return &ConfigError{Field: "Token", Reason: fmt.Sprintf("must be at least %d bytes", MinTokenLength)}
	case c.Token != strings.TrimSpace(c.Token):
		return &ConfigError{Field: "Token", Reason: "must not begin or end with white space"}
	}
	return nil
}
