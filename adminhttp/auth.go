package adminhttp

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"mime"
	"net"
	"net/http"
	"strings"
	"time"
)

const (
	sessionCookie = "outboxd_session"
	csrfField     = "csrf"
	csrfHeader    = "X-CSRF-Token"
)

// keys holds what authentication is checked against. The token itself is
// kept only as its SHA-256, for constant-time comparison.
type keys struct {
	tokenSet  bool
	tokenHash [32]byte
	// mac signs session cookies and derives CSRF tokens: an HMAC of the
	// token when one is set (so sessions survive a restart and die with a
	// changed token), random per process otherwise.
	mac []byte
}

func newKeys(token string) (keys, error) {
	if token == "" {
		k := keys{mac: make([]byte, 32)}
		if _, err := rand.Read(k.mac); err != nil {
			return keys{}, fmt.Errorf("adminhttp: session key: %w", err)
		}
		return k, nil
	}
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("outboxd admin session key v1"))
	return keys{tokenSet: true, tokenHash: sha256.Sum256([]byte(token)), mac: m.Sum(nil)}, nil
}

// tokenMatches compares in constant time (over hashes, so the length of the
// token does not leak either).
func (k keys) tokenMatches(given string) bool {
	h := sha256.Sum256([]byte(given))
	return k.tokenSet && subtle.ConstantTimeCompare(h[:], k.tokenHash[:]) == 1
}

func (k keys) sign(parts ...string) []byte {
	m := hmac.New(sha256.New, k.mac)
	for _, p := range parts {
		m.Write([]byte(p))
		m.Write([]byte{0})
	}
	return m.Sum(nil)
}

// newSession returns a session cookie value: an issue time and a random
// nonce, signed.
func (k keys) newSession(now time.Time) (string, error) {
	raw := make([]byte, 24)
	binary.BigEndian.PutUint64(raw, uint64(now.Unix()))
	if _, err := rand.Read(raw[8:]); err != nil {
		return "", err
	}
	body := base64.RawURLEncoding.EncodeToString(raw)
	return body + "." + base64.RawURLEncoding.EncodeToString(k.sign("session", body)), nil
}

// validSession checks a session cookie value's signature and age.
func (k keys) validSession(v string, now time.Time, ttl time.Duration) bool {
	body, sig, ok := strings.Cut(v, ".")
	if !ok {
		return false
	}
	raw, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil || len(raw) != 24 {
		return false
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(got, k.sign("session", body)) {
		return false
	}
	issued := time.Unix(int64(binary.BigEndian.Uint64(raw)), 0)
	return !now.Before(issued.Add(-time.Minute)) && now.Before(issued.Add(ttl))
}

// csrfToken derives the CSRF token of a session.
func (k keys) csrfToken(session string) string {
	return base64.RawURLEncoding.EncodeToString(k.sign("csrf", session))
}

func (k keys) validCSRF(session, given string) bool {
	got, err := base64.RawURLEncoding.DecodeString(given)
	return err == nil && session != "" && hmac.Equal(got, k.sign("csrf", session))
}

// authKind is how a request authenticated.
type authKind int

const (
	authNone   authKind = iota // no valid credentials, and a token is required
	authForged                 // a bearer token that is not the token
	authBearer                 // Authorization: Bearer <token>
	authCookie                 // a valid session cookie
	authOpen                   // no token configured: loopback only
)

// authResult is a request's authentication.
type authResult struct {
	kind    authKind
	session string // the valid session cookie's value, if any
	// storeErr is set when the session cookie could not be checked because
	// the session store (the database) failed; kind is then authNone.
	storeErr error
}

// keyID names the token sessions are made with, without revealing it.
func (k keys) keyID() []byte { return k.sign("session key id")[:16] }

// signedSession returns r's session cookie when its signature and age are
// valid, else "".
func (h *Handler) signedSession(r *http.Request) string {
	if c, err := r.Cookie(sessionCookie); err == nil && h.keys.validSession(c.Value, h.cfg.Now(), h.cfg.SessionTTL) {
		return c.Value
	}
	return ""
}

// authenticate checks r's bearer token or, without one, its session
// cookie: signed and, when a token is set, recorded in the session store
// (so not signed out nor made with a replaced token).
func (h *Handler) authenticate(r *http.Request) authResult {
	var res authResult
	if header := r.Header.Get("Authorization"); header != "" && h.keys.tokenSet {
		scheme, tok, _ := strings.Cut(header, " ")
		if strings.EqualFold(scheme, "Bearer") && h.keys.tokenMatches(strings.TrimSpace(tok)) {
			res.kind = authBearer
		} else {
			res.kind = authForged
		}
		return res
	}
	res.session = h.signedSession(r)
	if res.session != "" && h.keys.tokenSet {
		ok, err := h.sessions.valid(r.Context(), res.session, h.cfg.Now())
		if err != nil {
			h.cfg.Logger.WarnContext(r.Context(), "admin session could not be checked: the session store failed", "error", err)
			res.storeErr = err
		}
		if !ok {
			res.session = ""
		}
	}
	switch {
	case !h.keys.tokenSet:
		res.kind = authOpen
	case res.session != "":
		res.kind = authCookie
	default:
		res.kind = authNone
	}
	return res
}

func (a authResult) ok() bool { return a.kind >= authBearer }

// storeUnavailableMsg answers a request whose session could not be checked.
const storeUnavailableMsg = "the session could not be checked: the database does not answer; try again (API clients can use the bearer token meanwhile)"

// needsCSRF reports whether a POST so authenticated must carry the CSRF
// token: every one a browser could have sent on its own.
func (a authResult) needsCSRF() bool { return a.kind != authBearer }

// isJSON reports whether the request's body is declared as JSON.
func isJSON(r *http.Request) bool {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return err == nil && mt == "application/json"
}

// loopbackHost reports whether a Host header names a loopback host.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return IsLoopback(host)
}

// secureCookie reports whether a cookie set in answer to r must be Secure:
// the request came over TLS, or the operator said a proxy terminates TLS
// in front of this server.
func (h *Handler) secureCookie(r *http.Request) bool {
	return r.TLS != nil || h.cfg.TLSTerminated
}

// setSessionCookie starts a session in the browser. The cookie is
// HttpOnly, SameSite=Strict, and Secure (see secureCookie).
func (h *Handler) setSessionCookie(w http.ResponseWriter, r *http.Request, value string) {
	http.SetCookie(w, &http.Cookie{
		Name:     sessionCookie,
		Value:    value,
		Path:     h.cookiePath(),
		MaxAge:   int(h.cfg.SessionTTL / time.Second),
		HttpOnly: true,
		Secure:   h.secureCookie(r),
		SameSite: http.SameSiteStrictMode,
	})
}

func (h *Handler) clearSessionCookie(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: "", Path: h.cookiePath(), MaxAge: -1,
		HttpOnly: true, Secure: h.secureCookie(r), SameSite: http.SameSiteStrictMode,
	})
}

// cookiePath scopes the session cookie to the handler's routes.
func (h *Handler) cookiePath() string {
	if h.cfg.Prefix == "" {
		return "/"
	}
	return h.cfg.Prefix
}
