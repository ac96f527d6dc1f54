package adminhttp

import (
	"context"
	"errors"
	"net/http"

	"github.com/outboxkit/outbox/migrations"
)

// healthz answers 200 "ok" while the process serves: a liveness probe. It
// needs no token and touches nothing.
func (h *Handler) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("ok\n"))
}

// readyz answers 200 "ready" when the database answers and its schema is
// current, else 503 with the reason: a readiness probe.
func (h *Handler) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), DefaultReadinessTimeout)
	defer cancel()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if err := h.cfg.Pool.Ping(ctx); err != nil {
		h.cfg.Logger.WarnContext(ctx, "not ready: database does not answer", "error", err)
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("not ready: the database does not answer\n"))
		return
	}
	if err := migrations.New(h.cfg.Pool, nil).Check(ctx); err != nil {
		h.cfg.Logger.WarnContext(ctx, "not ready: schema", "error", err)
		reason := "the schema check failed (logged by the server)"
		if errors.Is(err, migrations.ErrNotMigrated) {
			reason = err.Error()
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("not ready: " + reason + "\n"))
		return
	}
	_, _ = w.Write([]byte("ready\n"))
}
