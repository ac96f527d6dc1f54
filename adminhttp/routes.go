package adminhttp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

type ctxKey struct{}

// authFrom returns the authentication the middleware stored.
func authFrom(ctx context.Context) authResult {
	a, _ := ctx.Value(ctxKey{}).(authResult)
	return a
}

// newRoutes maps every route, under Config.Prefix, to its handler, behind
// the checks every request goes through.
func (h *Handler) newRoutes() http.Handler {
	mux := http.NewServeMux()
	// handle registers pattern ("GET /path") with the path under the
	// prefix.
	handle := func(pattern string, handler http.Handler) {
		method, path, ok := strings.Cut(pattern, " ")
		if !ok {
			method, path = "", pattern
		}
		mux.Handle(strings.TrimSpace(method+" "+h.path(path)), handler)
	}

	// Probes and metrics.
	handle("GET /healthz", http.HandlerFunc(h.healthz))
	handle("GET /readyz", h.plain(http.HandlerFunc(h.readyz)))
	handle("GET /metrics", h.plain(promhttp.HandlerFor(h.cfg.Gatherer, promhttp.HandlerOpts{ErrorLog: slogPrinter{h.cfg.Logger}})))

	// JSON API.
	handle("GET /api/v1/intents", h.api(h.apiList))
	handle("GET /api/v1/intents/{ref}", h.api(h.apiGet))
	handle("POST /api/v1/intents/{id}/{action}", h.api(h.apiAction))
	handle("POST /api/v1/intents/{id}/reveal", h.api(h.apiReveal))
	handle("POST /api/v1/intents/bulk", h.api(h.apiBulk))
	handle("GET /api/v1/stats", h.api(h.apiStats))
	handle("POST /api/v1/messages", h.api(h.apiRecord))
	handle("/api/", h.api(func(w http.ResponseWriter, r *http.Request) error {
		return &requestError{Status: http.StatusNotFound, Msg: "no such API endpoint: " + r.Method + " " + r.URL.Path}
	}))

	// Dashboard.
	handle("GET /static/style.css", http.HandlerFunc(h.styleCSS))
	handle("GET /login", http.HandlerFunc(h.loginPage))
	handle("POST /login", http.HandlerFunc(h.login))
	handle("POST /logout", h.page(h.logout))
	handle("GET /{$}", h.page(h.listPage))
	handle("GET /intents/{ref}", h.page(h.detailPage))
	handle("GET /references/{ref}", h.page(h.referencePage))
	handle("GET /intents/{id}/{action}", h.page(h.confirmPage))
	handle("POST /intents/{id}/{action}", h.page(h.actionSubmit))
	handle("POST /intents/{id}/reveal", h.page(h.revealSubmit))
	handle("GET /bulk/{action}", h.page(h.bulkPreview))
	handle("POST /bulk/{action}", h.page(h.bulkSubmit))

	// River's UI.
	if h.riverUI != nil {
		handle(RiverUIPath+"/", h.riverUIAuth(h.riverUI))
	}

	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSONError(w, http.StatusForbidden, "", "cross-origin request refused")
	}))
	return h.commonHeaders(h.hostCheck(cop.Handler(mux)))
}

// commonHeaders sets headers every response gets.
func (h *Handler) commonHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hdr := w.Header()
		hdr.Set("X-Content-Type-Options", "nosniff")
		hdr.Set("Referrer-Policy", "same-origin")
		hdr.Set("X-Frame-Options", "DENY")
		if !strings.HasPrefix(r.URL.Path, h.path(RiverUIPath+"/")) {
			hdr.Set("Cache-Control", "no-store")
		}
		next.ServeHTTP(w, r)
	})
}

// hostCheck refuses, when no token is configured, a client that does not
// connect from loopback (a handler mounted in a server that listens on
// more than its Config.Addr said), and a Host header that is not a
// loopback name: a page on another site that rebinds its DNS name to
// 127.0.0.1 would otherwise be same-origin with this server.
func (h *Handler) hostCheck(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case h.keys.tokenSet:
		case !IsLoopback(r.RemoteAddr):
			writeJSONError(w, http.StatusForbidden, "", "without an admin token this server answers only clients on loopback")
			return
		case !loopbackHost(r.Host):
			writeJSONError(w, http.StatusMisdirectedRequest, "Host", "without an admin token this server answers only to loopback host names (localhost, 127.0.0.1, [::1])")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// apiHandler is an API handler; a returned error becomes the JSON error
// response.
type apiHandler func(w http.ResponseWriter, r *http.Request) error

// api authenticates an API request and, for a POST, bounds its body,
// requires JSON, and requires the CSRF header when it came with a session
// cookie rather than a bearer token.
func (h *Handler) api(serve apiHandler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := h.authenticate(r)
		if a.storeErr != nil {
			writeJSONError(w, http.StatusServiceUnavailable, "", storeUnavailableMsg)
			return
		}
		if !a.ok() {
			w.Header().Set("WWW-Authenticate", `Bearer realm="outboxd"`)
			writeJSONError(w, http.StatusUnauthorized, "", "missing or invalid bearer token")
			return
		}
		if r.Method == http.MethodPost {
			if !isJSON(r) {
				writeJSONError(w, http.StatusUnsupportedMediaType, "Content-Type", "Content-Type must be application/json")
				return
			}
			if a.kind == authCookie && !h.keys.validCSRF(a.session, r.Header.Get(csrfHeader)) {
				writeJSONError(w, http.StatusForbidden, csrfHeader, "missing or invalid CSRF token: a request authenticated by a session cookie must send "+csrfHeader)
				return
			}
		}
		run := func() {
			if err := serve(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, a))); err != nil {
				h.writeError(w, r, err)
			}
		}
		if r.Method != http.MethodPost {
			run()
			return
		}
		h.withBody(w, r, run)
	})
}

// plain authenticates a probe or metrics request (401 in plain text).
func (h *Handler) plain(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := h.authenticate(r)
		if a.storeErr != nil {
			http.Error(w, storeUnavailableMsg, http.StatusServiceUnavailable)
			return
		}
		if !a.ok() {
			w.Header().Set("WWW-Authenticate", `Bearer realm="outboxd"`)
			http.Error(w, "missing or invalid bearer token", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// riverUIAuth puts River's UI behind the same authentication: a browser
// without a session is sent to /login, an API call gets 401. River's UI
// posts JSON from its own pages, which cross-origin protection and the
// SameSite=Strict cookie guard.
func (h *Handler) riverUIAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := h.authenticate(r)
		if a.storeErr != nil {
			writeJSONError(w, http.StatusServiceUnavailable, "", storeUnavailableMsg)
			return
		}
		if !a.ok() {
			if a.kind == authNone && r.Method == http.MethodGet && !strings.HasPrefix(r.URL.Path, h.path(RiverUIPath+"/api/")) {
				h.toSignIn(w, r)
				return
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="outboxd"`)
			writeJSONError(w, http.StatusUnauthorized, "", "missing or invalid bearer token")
			return
		}
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			next.ServeHTTP(w, r)
			return
		}
		h.withBody(w, r, func() { next.ServeHTTP(w, r) })
	})
}

// writeError maps an error to its status and writes it as JSON. Errors not
// caused by the request are logged and shown as a generic message.
func (h *Handler) writeError(w http.ResponseWriter, r *http.Request, err error) {
	status, field, msg := h.classify(r, err)
	writeJSONError(w, status, field, msg)
}

func writeJSONError(w http.ResponseWriter, status int, field, msg string) {
	body := map[string]string{"error": msg}
	if field != "" {
		body["field"] = field
	}
	writeJSON(w, status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// isTooLarge reports whether err is http.MaxBytesReader's.
// bodyTooLarge is the 413 of a body http.MaxBytesReader cut at its limit
// (err is its error), nil for any other error.
func bodyTooLarge(err error) *requestError {
	var mb *http.MaxBytesError
	if !errors.As(err, &mb) {
		return nil
	}
	return &requestError{Status: http.StatusRequestEntityTooLarge, Msg: fmt.Sprintf("request body is larger than %d bytes", mb.Limit)}
}

// withBody runs next for a request with a body once one of
// MaxConcurrentBodies is free, with the body bounded by Config.MaxBodyBytes; it
// answers 503 when none frees up within BodyWait.
func (h *Handler) withBody(w http.ResponseWriter, r *http.Request, next func()) {
	timer := time.NewTimer(BodyWait)
	defer timer.Stop()
	select {
	case h.bodies <- struct{}{}:
	case <-timer.C:
		w.Header().Set("Retry-After", "1")
		writeJSONError(w, http.StatusServiceUnavailable, "", fmt.Sprintf("the server is reading %d request bodies already: try again", MaxConcurrentBodies))
		return
	case <-r.Context().Done():
		return
	}
	defer func() { <-h.bodies }()
	r.Body = http.MaxBytesReader(w, r.Body, int64(h.cfg.MaxBodyBytes))
	next()
}
