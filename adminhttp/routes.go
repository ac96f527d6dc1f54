package adminhttp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
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

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()

	// Probes and metrics.
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.Handle("GET /readyz", s.plain(http.HandlerFunc(s.readyz)))
	mux.Handle("GET /metrics", s.plain(promhttp.HandlerFor(s.cfg.Gatherer, promhttp.HandlerOpts{ErrorLog: slogPrinter{s.cfg.Logger}})))

	// JSON API.
	mux.Handle("GET /api/v1/intents", s.api(s.apiList))
	mux.Handle("GET /api/v1/intents/{ref}", s.api(s.apiGet))
	mux.Handle("POST /api/v1/intents/{id}/{action}", s.api(s.apiAction))
	mux.Handle("POST /api/v1/intents/{id}/reveal", s.api(s.apiReveal))
	mux.Handle("POST /api/v1/intents/bulk", s.api(s.apiBulk))
	mux.Handle("GET /api/v1/stats", s.api(s.apiStats))
	mux.Handle("POST /api/v1/messages", s.api(s.apiRecord))
	mux.Handle("/api/", s.api(func(w http.ResponseWriter, r *http.Request) error {
		return &requestError{Status: http.StatusNotFound, Msg: "no such API endpoint: " + r.Method + " " + r.URL.Path}
	}))

	// Dashboard.
	mux.HandleFunc("GET /static/style.css", s.styleCSS)
	mux.HandleFunc("GET /login", s.loginPage)
	mux.HandleFunc("POST /login", s.login)
	mux.Handle("POST /logout", s.page(s.logout))
	mux.Handle("GET /{$}", s.page(s.listPage))
	mux.Handle("GET /intents/{ref}", s.page(s.detailPage))
	mux.Handle("GET /references/{ref}", s.page(s.referencePage))
	mux.Handle("GET /intents/{id}/{action}", s.page(s.confirmPage))
	mux.Handle("POST /intents/{id}/{action}", s.page(s.actionSubmit))

	// River's UI.
	if s.riverUI != nil {
		mux.Handle(RiverUIPrefix+"/", s.riverUIAuth(s.riverUI))
	}

	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSONError(w, http.StatusForbidden, "", "cross-origin request refused")
	}))
	return s.commonHeaders(s.hostCheck(cop.Handler(mux)))
}

// commonHeaders sets headers every response gets.
func (s *Server) commonHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("X-Frame-Options", "DENY")
		if !strings.HasPrefix(r.URL.Path, RiverUIPrefix+"/") {
			h.Set("Cache-Control", "no-store")
		}
		next.ServeHTTP(w, r)
	})
}

// hostCheck refuses, when no token is configured, a Host header that is not
// a loopback name: a page on another site that rebinds its DNS name to
// 127.0.0.1 would otherwise be same-origin with this server.
func (s *Server) hostCheck(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.keys.tokenSet && !loopbackHost(r.Host) {
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
func (s *Server) api(h apiHandler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := s.authenticate(r)
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
			if a.kind == authCookie && !s.keys.validCSRF(a.session, r.Header.Get(csrfHeader)) {
				writeJSONError(w, http.StatusForbidden, csrfHeader, "missing or invalid CSRF token: a request authenticated by a session cookie must send "+csrfHeader)
				return
			}
		}
		run := func() {
			if err := h(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, a))); err != nil {
				s.writeError(w, r, err)
			}
		}
		if r.Method != http.MethodPost {
			run()
			return
		}
		s.withBody(w, r, run)
	})
}

// plain authenticates a probe or metrics request (401 in plain text).
func (s *Server) plain(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := s.authenticate(r)
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
func (s *Server) riverUIAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := s.authenticate(r)
		if a.storeErr != nil {
			writeJSONError(w, http.StatusServiceUnavailable, "", storeUnavailableMsg)
			return
		}
		if !a.ok() {
			if a.kind == authNone && r.Method == http.MethodGet && !strings.HasPrefix(r.URL.Path, RiverUIPrefix+"/api/") {
				http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
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
		s.withBody(w, r, func() { next.ServeHTTP(w, r) })
	})
}

// writeError maps an error to its status and writes it as JSON. Errors not
// caused by the request are logged and shown as a generic message.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	status, field, msg := s.classify(r, err)
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
func isTooLarge(err error) bool {
	var mb *http.MaxBytesError
	return errors.As(err, &mb)
}

// withBody runs next for a request with a body once one of
// MaxConcurrentBodies is free, with the body bounded by MaxBodyBytes; it
// answers 503 when none frees up within BodyWait.
func (s *Server) withBody(w http.ResponseWriter, r *http.Request, next func()) {
	timer := time.NewTimer(BodyWait)
	defer timer.Stop()
	select {
	case s.bodies <- struct{}{}:
	case <-timer.C:
		w.Header().Set("Retry-After", "1")
		writeJSONError(w, http.StatusServiceUnavailable, "", fmt.Sprintf("the server is reading %d request bodies already: try again", MaxConcurrentBodies))
		return
	case <-r.Context().Done():
		return
	}
	defer func() { <-s.bodies }()
	r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
	next()
}
