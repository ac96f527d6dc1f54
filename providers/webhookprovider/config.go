package webhookprovider

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/textproto"
	"net/url"
	"slices"
	"strings"
	"time"
)

// ErrInvalidConfig is wrapped by every error New returns. The error's text
// names the offending field, as in
// `Config.Endpoints["orders"].KeyWindow is required when IdempotencyHeader is set`.
var ErrInvalidConfig = errors.New("webhookprovider: invalid config")

// Config configures a Provider.
//
// Capabilities belong to a provider, not to an endpoint, so the provider is
// keyed (declares providers.Capabilities.IdempotencyKeys) only when every
// endpoint has an IdempotencyHeader; its key window is then the shortest of
// the endpoints' KeyWindows. One endpoint without idempotency makes the
// whole provider unkeyed: every delivery then gets the dispatcher's
// write-ahead bookkeeping and every possibly-delivered attempt is held
// in_doubt instead of repeated, which is safe for keyed receivers too, only
// less automatic.
type Config struct {
	// Endpoints are the receivers, by the name a payload's "endpoint" field
	// gives. At least one is required. Names are stored in intents, so
	// renaming one strands the intents recorded under the old name.
	Endpoints map[string]Endpoint
	// HTTPClient makes the requests. Defaults to a client that does not
	// follow redirects (a redirected POST could be delivered elsewhere),
	// over providers.NewHTTPTransport when the provider is keyed and over
	// providers.NewUnkeyedHTTPTransport (HTTP/1.1) when it is not. Each
	// request is bounded by its endpoint's Timeout, whatever the client's
	// own timeout.
	//
	// When the provider is unkeyed, the client, default or not, is used
	// through providers.UnkeyedClient: redirects are not followed (the
	// client's CheckRedirect is ignored) and no layer of net/http may send
	// a delivery twice (its HTTP/2 retry after a stream reset, a keep-alive
	// replay, which a keyed endpoint's Idempotency-Key header would
	// otherwise allow). A keyed provider uses the client as given: the key
	// makes a repeat harmless. The given client is not modified.
	HTTPClient *http.Client
	// Now is the clock used for the signature's timestamp and the body's
	// created_at. Defaults to time.Now.
	Now func() time.Time
}

// Endpoint is one receiver of webhook deliveries.
type Endpoint struct {
	// URL receives the POSTs: an absolute http or https URL without
	// credentials or fragment. Required. Its path and query may hold a
	// token (many receivers' URLs do), so errors show only its scheme and
	// host.
	URL string
	// Secret is the HMAC-SHA256 key the body is signed with (see Sign); the
	// receiver checks the signature with the same secret (Verify). Required;
	// use at least 32 random bytes, loaded from the environment or a file,
	// never from a flag. It is never logged and never put in an error.
	Secret string
	// IdempotencyHeader is the request header that carries the intent's
	// idempotency key ("Idempotency-Key"), for a receiver that answers a
	// repeated key with its first answer instead of acting again. Empty
	// means the receiver has no idempotency: the key is still sent as the
	// body's "id", but a possibly delivered attempt is never repeated.
	IdempotencyHeader string
	// KeyWindow is how long the receiver remembers a key. Required when
	// IdempotencyHeader is set, ignored otherwise.
	KeyWindow time.Duration
	// MaxKeyLength is the longest key the receiver accepts, in bytes (Adyen
	// takes 64). 0 means no limit. Only used when IdempotencyHeader is set.
	MaxKeyLength int
	// Timeout bounds one delivery, from connecting to reading the response.
	// Defaults to DefaultTimeout.
	Timeout time.Duration
	// ReferenceHeader is the response header whose value is recorded as the
	// delivery's provider reference. Defaults to DefaultReferenceHeader;
	// when the response has none, the reference is "status:<code>".
	ReferenceHeader string
}

// String describes c with secrets and URL paths hidden.
func (c Config) String() string {
	names := make([]string, 0, len(c.Endpoints))
	for n := range c.Endpoints {
		names = append(names, n)
	}
	slices.Sort(names)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%q:%s", n, c.Endpoints[n])
	}
	return "webhookprovider.Config{Endpoints:{" + strings.Join(parts, " ") + "}}"
}

// GoString is String, for the %#v verb.
func (c Config) GoString() string { return c.String() }

// LogValue is String, so that logging a Config with log/slog hides secrets.
func (c Config) LogValue() slog.Value { return slog.StringValue(c.String()) }

// String describes e with its secret hidden and its URL reduced to scheme and
// host.
func (e Endpoint) String() string {
	secret := `""`
	if e.Secret != "" {
		secret = "[redacted]"
	}
	return fmt.Sprintf("Endpoint{URL:%q Secret:%s IdempotencyHeader:%q KeyWindow:%s Timeout:%s}",
		redactURL(e.URL), secret, e.IdempotencyHeader, e.KeyWindow, e.Timeout)
}

// GoString is String, for the %#v verb.
func (e Endpoint) GoString() string { return e.String() }

// LogValue is String, so that logging an Endpoint with log/slog hides its
// secret.
func (e Endpoint) LogValue() slog.Value { return slog.StringValue(e.String()) }

// redactURL keeps a URL's scheme and host: its path, query and user info
// may hold tokens.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "[unparseable URL]"
	}
	out := u.Scheme + "://" + u.Host
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		out += "/…"
	}
	return out
}

// endpoint is an Endpoint with defaults filled in.
type endpoint struct {
	name         string
	url          string
	display      string // redactURL(url)
	secret       string
	keyHeader    string
	keyWindow    time.Duration
	maxKeyLength int
	timeout      time.Duration
	refHeader    string
}

func checkEndpoint(name string, e Endpoint) (*endpoint, error) {
	field := fmt.Sprintf("Config.Endpoints[%q]", name)
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, field+fmt.Sprintf(format, args...))
	}
	if name == "" || strings.TrimSpace(name) != name || len(name) > maxNameLength {
		return nil, fmt.Errorf("%w: Config.Endpoints: name %q must be 1 to %d characters without surrounding spaces", ErrInvalidConfig, name, maxNameLength)
	}
	u, err := url.Parse(e.URL)
	switch {
	case e.URL == "":
		return nil, bad(".URL is required")
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return nil, bad(".URL must be an absolute http or https URL")
	case u.User != nil:
		return nil, bad(".URL must not contain credentials: sign with Secret instead")
	case u.Fragment != "":
		return nil, bad(".URL must not have a fragment")
	}
	if e.Secret == "" {
		return nil, bad(".Secret is required: the HMAC key receivers verify deliveries with")
	}
	if e.IdempotencyHeader != "" && !validHeaderName(e.IdempotencyHeader) {
		return nil, bad(".IdempotencyHeader %q is not a valid HTTP header name", e.IdempotencyHeader)
	}
	if reserved(e.IdempotencyHeader) {
		return nil, bad(".IdempotencyHeader %q is a header the provider sets itself", e.IdempotencyHeader)
	}
	if e.IdempotencyHeader != "" && e.KeyWindow <= 0 {
		return nil, bad(".KeyWindow is required when IdempotencyHeader is set: how long the receiver remembers a key")
	}
	if e.KeyWindow < 0 {
		return nil, bad(".KeyWindow must not be negative, got %s", e.KeyWindow)
	}
	if e.MaxKeyLength < 0 {
		return nil, bad(".MaxKeyLength must not be negative, got %d", e.MaxKeyLength)
	}
	if e.Timeout < 0 {
		return nil, bad(".Timeout must not be negative, got %s", e.Timeout)
	}
	if e.ReferenceHeader != "" && !validHeaderName(e.ReferenceHeader) {
		return nil, bad(".ReferenceHeader %q is not a valid HTTP header name", e.ReferenceHeader)
	}
	ep := &endpoint{
		name:      name,
		url:       e.URL,
		display:   redactURL(e.URL),
		secret:    e.Secret,
		keyHeader: textproto.CanonicalMIMEHeaderKey(e.IdempotencyHeader),
		timeout:   e.Timeout,
		refHeader: e.ReferenceHeader,
	}
	if ep.keyHeader != "" {
		ep.keyWindow = e.KeyWindow
		ep.maxKeyLength = e.MaxKeyLength
	}
	if ep.timeout == 0 {
		ep.timeout = DefaultTimeout
	}
	if ep.refHeader == "" {
		ep.refHeader = DefaultReferenceHeader
	}
	return ep, nil
}

const maxNameLength = 100

func validHeaderName(h string) bool {
	if h == "" {
		return false
	}
	for _, c := range []byte(h) {
		// RFC 9110 token characters.
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

func reserved(h string) bool {
	switch textproto.CanonicalMIMEHeaderKey(h) {
	case SignatureHeader, IntentIDHeader, NamespaceHeader, "Content-Type", "Content-Length", "Host", "User-Agent":
		return true
	}
	return false
}
