package adminhttp

import (
	"context"
	"fmt"
	"html/template"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"riverqueue.com/riverui"

	"github.com/outboxkit/outbox/intents/audit"
	"github.com/outboxkit/outbox/internal/ingest"
)

// Handler is the dashboard, the JSON API, the probes, /metrics and River's
// UI as one http.Handler, for mounting in your own server under
// Config.Prefix. Create it with NewHandler and Start it before serving. It
// is safe for concurrent use.
type Handler struct {
	cfg      Config
	keys     keys
	logins   *loginLimiter
	sessions sessionStore
	pages    *template.Template
	ingest   *ingest.Recorder
	riverUI  *riverui.Handler
	routes   http.Handler
	// stats and activity are the counts every list page and
	// /api/v1/stats read, shared among the readers (see sharedRead).
	stats    *sharedRead[audit.Stats]
	activity *sharedRead[timedActivity]

	// bodies holds a token for each request body being read and handled.
	bodies chan struct{}
	// where is which deployment this is, but for its namespace, which
	// Start reads (a request may be served meanwhile).
	where     where
	namespace atomic.Pointer[string]
}

// where names the deployment a dashboard page is of.
type where struct {
	Database, Host, Namespace, Version string
}

// NewHandler validates cfg and builds the handler; it does no I/O. Its
// errors are *ConfigError naming the field.
func NewHandler(cfg Config) (*Handler, error) {
	cfg, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	k, err := newKeys(cfg.Token)
	if err != nil {
		return nil, err
	}
	pages, err := parseTemplates(cfg.Now, cfg.Prefix)
	if err != nil {
		return nil, err
	}
	cc := cfg.Pool.Config().ConnConfig
	h := &Handler{
		cfg: cfg, keys: k, pages: pages,
		logins:   newLoginLimiter(cfg.Now),
		sessions: sessionStore{pool: cfg.Pool, keyID: k.keyID()},
		ingest:   ingest.New(cfg.Intents, cfg.Observer).WithUnknownKindHint(cfg.UnknownKindHint),
		bodies:   make(chan struct{}, MaxConcurrentBodies),
		where:    where{Database: cc.Database, Host: cc.Host, Version: cfg.Version},
	}
	h.stats = newSharedRead(cfg.Audit.Stats, time.Now)
	h.activity = newSharedRead(h.readActivity, time.Now)
	if !cfg.DisableRiverUI {
		if h.riverUI, err = newRiverUI(cfg); err != nil {
			return nil, err
		}
	}
	h.routes = h.newRoutes()
	return h, nil
}

// newRiverUI builds River's UI on cfg.RiverClient, or on an insert-only
// client of cfg.Pool.
func newRiverUI(cfg Config) (*riverui.Handler, error) {
	client := cfg.RiverClient
	if client == nil {
		var err error
		client, err = river.NewClient(riverpgxv5.New(cfg.Pool), &river.Config{Logger: cfg.Logger})
		if err != nil {
			return nil, &ConfigError{Field: "RiverClient", Reason: err.Error()}
		}
	}
	ui, err := riverui.NewHandler(&riverui.HandlerOpts{
		Endpoints: riverui.NewEndpoints(client, nil),
		Logger:    cfg.Logger,
		Prefix:    cfg.Prefix + RiverUIPath,
	})
	if err != nil {
		return nil, &ConfigError{Field: "RiverClient", Reason: "build River UI: " + err.Error()}
	}
	return ui, nil
}

// Start readies the handler to serve: it reads the deployment's namespace
// for the pages' header (best effort: a page without it is still a page),
// removes the dashboard sessions made with another token (best effort
// too: every sign-in tries again), and starts River's UI, whose services
// run until ctx is done. An error is River's UI failing to start.
func (h *Handler) Start(ctx context.Context) error {
	var namespace string
	if err := h.cfg.Pool.QueryRow(ctx, `SELECT namespace FROM outbox_namespace`).Scan(&namespace); err == nil {
		h.namespace.Store(&namespace)
	}
	if h.keys.tokenSet {
		if n, err := h.sessions.prune(ctx, h.cfg.Now()); err != nil {
			h.cfg.Logger.WarnContext(ctx, "admin sessions could not be pruned", "error", err)
		} else if n > 0 {
			h.cfg.Logger.InfoContext(ctx, "admin token changed: ended the dashboard sessions made with the previous one", "sessions", n)
		}
	}
	if h.riverUI != nil {
		if err := h.riverUI.Start(ctx); err != nil {
			return fmt.Errorf("adminhttp: start River UI: %w", err)
		}
	}
	return nil
}

// ServeHTTP serves the request whose path is under Config.Prefix; any
// other path is answered 404.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.routes.ServeHTTP(w, r)
}

// deployment is which deployment this is, for a page's header.
func (h *Handler) deployment() where {
	w := h.where
	if ns := h.namespace.Load(); ns != nil {
		w.Namespace = *ns
	}
	return w
}

// path is p (an absolute path, "/intents/7") under Config.Prefix.
func (h *Handler) path(p string) string { return h.cfg.Prefix + p }
