// Package adminhttp is the admin HTTP server inside `outboxd run`: a JSON
// API that mirrors the CLI, a server-rendered dashboard for operators,
// health and readiness probes, Prometheus metrics, and River's own UI.
//
// # Authentication
//
// A bearer token (Config.Token) is required unless the server listens on a
// loopback address only; New refuses a non-loopback address without one. API
// clients send "Authorization: Bearer <token>". A browser signs in once on
// /login with the token and gets an HttpOnly, SameSite=Strict session cookie
// signed with a key derived from the token, never the token itself. The
// session is also recorded in the database (outbox_admin_sessions), so it
// ends on every process sharing it when the operator signs out, after
// Config.SessionTTL, or when the token changes (a server started with a
// new token removes the sessions made with the old one).
// Failed sign-ins are bounded per client address (LoginFailureBurst in a
// row, then one per LoginFailureRefill); beyond that /login answers 429
// with Retry-After, even to the right token.
// The cookie is Secure when the request came over TLS, or always when
// Config.TLSTerminated says a proxy terminates TLS in front of the server.
// /healthz is always open; /readyz, /metrics, the API, the dashboard and
// /riverui/ require the token when one is set.
//
// # Cross-site request forgery
//
// Every state-changing request is a POST. Dashboard forms carry a CSRF token
// derived from the session cookie by HMAC; a cookie-authenticated POST
// without it is refused with 403. API POSTs must be application/json (which
// a cross-site form cannot send) and need no CSRF token when authenticated
// with a bearer token, which browsers never attach on their own. On top of
// this every unsafe cross-origin browser request is refused
// (net/http.CrossOriginProtection), and without a token the Host header must
// name a loopback host, which defeats DNS rebinding.
package adminhttp

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"riverqueue.com/riverui"

	"github.com/outboxkit/outbox/intents/audit"
	"github.com/outboxkit/outbox/internal/ingest"
)

// Defaults and limits.
const (
	// DefaultAddr is the listen address when Config.Addr is empty: loopback
	// only, so no token is needed.
	DefaultAddr = "127.0.0.1:8080"
	// DefaultSessionTTL is how long a dashboard session lasts.
	DefaultSessionTTL = 12 * time.Hour
	// DefaultReadinessTimeout bounds the database checks of /readyz.
	DefaultReadinessTimeout = 5 * time.Second
	// MaxBodyBytes bounds a request body; a larger one is refused with 413.
	MaxBodyBytes = 1 << 20
	// MaxConcurrentBodies bounds the request bodies read at once, so that
	// what the server holds for them stays bounded whatever the clients
	// send (MaxConcurrentBodies times MaxBodyBytes and their decoding); a
	// request that finds them all taken for BodyWait is answered 503 with
	// Retry-After.
	MaxConcurrentBodies = 8
	// BodyWait is how long a request waits for one of MaxConcurrentBodies.
	BodyWait = 5 * time.Second
	// TokenEnv is the environment variable `outboxd run` reads the token
	// from (or from the file named by TokenEnv+"_FILE").
	TokenEnv = "OUTBOXD_ADMIN_TOKEN"
	// RiverUIPrefix is where River's UI is mounted.
	RiverUIPrefix = "/riverui"
)

// ErrInvalidConfig is wrapped by every *ConfigError.
var ErrInvalidConfig = errors.New("invalid admin server config")

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

// Config configures a Server.
type Config struct {
	// Version is the running program's version, shown in every page's
	// header beside the database and the namespace, so an operator knows
	// which deployment the dashboard is of. Optional.
	Version string
	// Addr is the TCP address to listen on ("127.0.0.1:8080", ":9090").
	// A port of 0 picks a free one; Server.Addr tells which. Defaults to
	// DefaultAddr.
	Addr string
	// Token is the shared secret API clients and operators present. Required
	// unless Addr is a loopback address (127.0.0.0/8, ::1, localhost); at
	// least 16 bytes when set. Never logged or rendered.
	Token string
	// Audit lists, shows and acts on intents. Required.
	Audit *audit.Store
	// Ingest records messages posted to /api/v1/messages. Required.
	Ingest *ingest.Recorder
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
	// TLSTerminated says that browsers reach the server over HTTPS through
	// a proxy that terminates TLS in front of it, so the session cookie is
	// marked Secure even though requests arrive over plain HTTP. Without
	// it, the cookie is Secure only on a request that came over TLS.
	TLSTerminated bool
	// Logger receives request errors and sign-in failures, never a secret.
	// Defaults to discarding.
	Logger *slog.Logger
	// Now is the clock, for session expiry. Defaults to time.Now.
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

func (c Config) withDefaults() (Config, error) {
	if c.Addr == "" {
		c.Addr = DefaultAddr
	}
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return c, &ConfigError{Field: "Addr", Reason: fmt.Sprintf("%q is not host:port: %v", c.Addr, err)}
	}
	switch {
	case c.Token == "" && !IsLoopback(c.Addr):
		return c, &ConfigError{Field: "Token", Reason: fmt.Sprintf("required when listening on %s, which is not a loopback address (set %s or %s_FILE)", c.Addr, TokenEnv, TokenEnv)}
	case c.Token != "" && len(c.Token) < 16:
		return c, &ConfigError{Field: "Token", Reason: "must be at least 16 bytes"}
	case c.Token != strings.TrimSpace(c.Token):
		return c, &ConfigError{Field: "Token", Reason: "must not begin or end with white space"}
	}
	if c.Audit == nil {
		return c, &ConfigError{Field: "Audit", Reason: "is required"}
	}
	if c.Ingest == nil {
		return c, &ConfigError{Field: "Ingest", Reason: "is required"}
	}
	if c.Pool == nil {
		return c, &ConfigError{Field: "Pool", Reason: "is required"}
	}
	if c.Gatherer == nil {
		c.Gatherer = prometheus.NewRegistry()
	}
	if c.SessionTTL < 0 {
		return c, &ConfigError{Field: "SessionTTL", Reason: "must not be negative"}
	}
	if c.SessionTTL == 0 {
		c.SessionTTL = DefaultSessionTTL
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c, nil
}

// Server is the admin HTTP server. Create it with New, then Start it; stop
// it with Shutdown.
type Server struct {
	cfg      Config
	keys     keys
	logins   *loginLimiter
	sessions sessionStore
	pages    *template.Template
	handler  http.Handler
	riverUI  *riverui.Handler
	http     *http.Server
	mu       sync.Mutex
	listener net.Listener
	stopUI   context.CancelFunc
	served   chan error

	shutdownOnce sync.Once
	shutdownErr  error

	// bodies holds a token for each request body being read and handled.
	bodies chan struct{}
	// where is which deployment this is, read by Start.
	where where
}

// where names the deployment a dashboard page is of.
type where struct {
	Database, Host, Namespace, Version string
}

// New validates cfg and builds the server without listening yet. Its
// errors are *ConfigError naming the field.
func New(cfg Config) (*Server, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	k, err := newKeys(cfg.Token)
	if err != nil {
		return nil, err
	}
	pages, err := parseTemplates(cfg.Now)
	if err != nil {
		return nil, err
	}
	s := &Server{bodies: make(chan struct{}, MaxConcurrentBodies), cfg: cfg, keys: k, logins: newLoginLimiter(cfg.Now), sessions: sessionStore{pool: cfg.Pool, keyID: k.keyID()}, pages: pages}
	if !cfg.DisableRiverUI {
		client := cfg.RiverClient
		if client == nil {
			client, err = river.NewClient(riverpgxv5.New(cfg.Pool), &river.Config{Logger: cfg.Logger})
			if err != nil {
				return nil, &ConfigError{Field: "RiverClient", Reason: err.Error()}
			}
		}
		s.riverUI, err = riverui.NewHandler(&riverui.HandlerOpts{
			Endpoints: riverui.NewEndpoints(client, nil),
			Logger:    cfg.Logger,
			Prefix:    RiverUIPrefix,
		})
		if err != nil {
			return nil, &ConfigError{Field: "RiverClient", Reason: "build River UI: " + err.Error()}
		}
	}
	s.handler = s.routes()
	s.http = &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn),
	}
	return s, nil
}

// Handler returns the server's routes, for mounting elsewhere or testing.
// River's UI answers only after Start.
func (s *Server) Handler() http.Handler { return s.handler }

// Start listens on Config.Addr and serves in the background until
// Shutdown. It returns once the listener is open, so a port in use is
// reported here. ctx bounds only starting.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.listener != nil {
		return errors.New("adminhttp: already started")
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("adminhttp: listen on %s: %w", s.cfg.Addr, err)
	}
	cc := s.cfg.Pool.Config().ConnConfig
	s.where = where{Database: cc.Database, Host: cc.Host, Version: s.cfg.Version}
	// Best effort: a page without the namespace is still a page.
	_ = s.cfg.Pool.QueryRow(ctx, `SELECT namespace FROM outbox_namespace`).Scan(&s.where.Namespace)
	if s.riverUI != nil {
		uiCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		if err := s.riverUI.Start(uiCtx); err != nil {
			cancel()
			ln.Close()
			return fmt.Errorf("adminhttp: start River UI: %w", err)
		}
		s.stopUI = cancel
	}
	if s.keys.tokenSet {
		// Best effort: the server works without it, and tries again on
		// every sign-in.
		if n, err := s.sessions.prune(ctx, s.cfg.Now()); err != nil {
			s.cfg.Logger.WarnContext(ctx, "admin sessions could not be pruned", "error", err)
		} else if n > 0 {
			s.cfg.Logger.InfoContext(ctx, "admin token changed: ended the dashboard sessions made with the previous one", "sessions", n)
		}
	}
	s.listener = ln
	s.served = make(chan error, 1)
	go func() {
		err := s.http.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		s.served <- err
	}()
	s.cfg.Logger.InfoContext(ctx, "admin server listening", "addr", ln.Addr().String(), "token_required", s.keys.tokenSet)
	return nil
}

// Addr returns the address the server listens on once started ("" before),
// with the real port when Config.Addr asked for port 0.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.listener == nil {
		return ""
	}
	return s.listener.Addr().String()
}

// Shutdown stops accepting connections and waits, until ctx is done, for
// requests in flight to finish; then it closes the rest. It is a no-op on
// a server that was never started; later calls return the first's result.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	started := s.listener != nil
	stopUI := s.stopUI
	s.mu.Unlock()
	if !started {
		return nil
	}
	s.shutdownOnce.Do(func() {
		if stopUI != nil {
			defer stopUI()
		}
		err := s.http.Shutdown(ctx)
		if err != nil {
			s.http.Close()
		}
		if serveErr := <-s.served; serveErr != nil && err == nil {
			err = serveErr
		}
		s.shutdownErr = err
	})
	return s.shutdownErr
}
