// Package adminhttp is the operator's door over HTTP: a server-rendered
// dashboard (list, filter, show, reveal, resend, resolve and cancel
// intents, one at a time or in bulk), a JSON API that mirrors the CLI,
// health and readiness probes, Prometheus metrics, and River's own UI.
// `outboxd run` serves it on its admin address; a service that embeds the
// dispatcher mounts the same Handler in its own server:
//
//	h, err := adminhttp.NewHandler(adminhttp.Config{
//		Prefix: "/outbox", Token: token, Audit: store, Intents: client, Pool: pool,
//	})
//	...
//	if err := h.Start(ctx); err != nil { ... }
//	mux.Handle("/outbox/", h)
//
// Every action goes through package audit (intents/audit), so the
// dashboard, the API and the CLI allow and refuse exactly the same things,
// and each is written to the intent's event log with who and why.
//
// # Authentication
//
// A bearer token (Config.Token) is required unless the handler is served
// on a loopback address only (Config.Addr); NewHandler refuses a
// configuration without either, and a handler without a token answers
// only clients connecting from loopback whose Host header names a
// loopback host. API clients send "Authorization: Bearer <token>". A
// browser signs in once on the sign-in page with the token and gets an
// HttpOnly, SameSite=Strict session cookie signed with a key derived from
// the token, never the token itself. The session is also recorded in the
// database (outbox_admin_sessions), so it ends on every process sharing
// it when the operator signs out, after Config.SessionTTL, or when the
// token changes (a handler started with a new token removes the sessions
// made with the old one).
// Failed sign-ins are bounded per client address (LoginFailureBurst in a
// row, then one per LoginFailureRefill); beyond that the sign-in page
// answers 429 with Retry-After, even to the right token.
// The cookie is Secure when the request came over TLS, or always when
// Config.TLSTerminated says a proxy terminates TLS in front of the server.
// /healthz is always open; /readyz, /metrics, the API, the dashboard and
// /riverui/ require the token when one is set.
//
// # Cross-site request forgery
//
// Every state-changing request is a POST, and so is every reveal of a
// payload. Dashboard forms carry a CSRF token derived from the session
// cookie by HMAC; a cookie-authenticated POST without it is refused with
// 403. API POSTs must be application/json (which a cross-site form cannot
// send) and need no CSRF token when authenticated with a bearer token,
// which browsers never attach on their own. On top of this every unsafe
// cross-origin browser request is refused
// (net/http.CrossOriginProtection), and without a token the Host header
// must name a loopback host, which defeats DNS rebinding.
//
// # Acting on what the operator saw
//
// Every action the dashboard offers is guarded as the API's are: by the
// intent's version as the page showed it (a resend from a stale page is
// refused, not applied to an intent that changed since), and by an action
// id minted when the form was rendered, so a form posted twice (a double
// click, a reload after a lost answer) is applied once. A bulk action is
// first previewed (a dry run listing every intent it would change and
// every one it would refuse); the confirmation acts only on the intents
// the preview listed, each at the version it listed.
package adminhttp
