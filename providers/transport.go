package providers

import (
	"crypto/tls"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"
)

// DefaultMaxIdleConnsPerHost is how many idle connections to one provider
// NewHTTPTransport and NewUnkeyedHTTPTransport keep: enough for a
// dispatcher's workers to reuse connections rather than open (and tear
// down) one per call, which net/http's default of 2 would make them do.
const DefaultMaxIdleConnsPerHost = 128

// NewHTTPTransport returns the transport adapters of providers WITH an
// idempotency key use for their default client: net/http's default settings
// (proxy from the environment, dial and TLS timeouts, HTTP/2) with
// DefaultMaxIdleConnsPerHost idle connections per host. Each adapter gets
// its own.
//
// net/http may send a request through this transport more than once: the
// HTTP/2 client re-sends a request whose body it can re-read after a stream
// reset (REFUSED_STREAM, a GOAWAY), and the HTTP/1 client replays some
// requests on a reused keep-alive connection. The provider's idempotency key
// makes that harmless. An adapter for a provider without a key must use
// UnkeyedClient instead (DESIGN.md, invariant 6).
func NewHTTPTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 2 * DefaultMaxIdleConnsPerHost
	t.MaxIdleConnsPerHost = DefaultMaxIdleConnsPerHost
	return t
}

// NewUnkeyedHTTPTransport returns the transport for providers WITHOUT an
// idempotency key: NewHTTPTransport's settings, but speaking HTTP/1.1 only
// (ForceAttemptHTTP2 off, an empty TLSNextProto, Protocols HTTP/1 alone), so
// that Go's HTTP/2 client, which re-sends requests after a stream reset, is
// never used. Each call returns a new transport.
//
// HTTP/1.1 alone does not stop net/http from replaying a request on a reused
// keep-alive connection: use it through UnkeyedClient, which also clears
// every request's GetBody. Changing the returned transport back to HTTP/2
// (setting Protocols, TLSNextProto or ForceAttemptHTTP2) is allowed but
// gives up this layer of the protection.
func NewUnkeyedHTTPTransport() *http.Transport {
	t := NewHTTPTransport()
	t.ForceAttemptHTTP2 = false
	t.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	var p http.Protocols
	p.SetHTTP1(true)
	t.Protocols = &p
	// Offer only HTTP/1.1 in ALPN. A clone of http.DefaultTransport that
	// was used before carries "h2" in its TLS config's NextProtos; offered,
	// a server that speaks HTTP/2 (SendGrid's API does) would pick it, and
	// this transport would then talk HTTP/1 on an HTTP/2 connection.
	if t.TLSClientConfig != nil {
		t.TLSClientConfig = t.TLSClientConfig.Clone()
	} else {
		t.TLSClientConfig = &tls.Config{}
	}
	t.TLSClientConfig.NextProtos = []string{"http/1.1"}
	return t
}

// UnkeyedClient returns the client an adapter for a provider without an
// idempotency key makes its calls with: a shallow copy of c (its Timeout,
// Jar and Transport are kept) in which
//
//   - redirects are not followed (CheckRedirect returns
//     http.ErrUseLastResponse): a followed 307 or 308 would send the same
//     body again, to another URL. c's own CheckRedirect is replaced;
//   - the Transport is wrapped so that every request reaches it with
//     GetBody cleared. Neither net/http's HTTP/1 keep-alive replay nor its
//     HTTP/2 retry after a stream reset can then send the request again:
//     they need GetBody to re-read a body that was already written. A nil
//     Transport becomes NewUnkeyedHTTPTransport() (not
//     http.DefaultTransport, which speaks HTTP/2 and is shared);
//   - a call that ends before the transport obtained any connection
//     returns an error wrapping *NotSentError, the proof that the request
//     never left (see NotSentError for when this is claimed).
//
// c's other transport settings, HTTP/2 included, are left as they are: with
// GetBody cleared, HTTP/2 answers a stream reset with an error rather than a
// second request. UnkeyedClient(nil) is UnkeyedClient(&http.Client{}), a
// client without a timeout. A client already returned by UnkeyedClient is
// not wrapped twice. c itself is not modified.
func UnkeyedClient(c *http.Client) *http.Client {
	var out http.Client
	if c != nil {
		out = *c
	}
	out.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	switch base := out.Transport.(type) {
	case *unkeyedRoundTripper:
		// Already wrapped.
	case nil:
		out.Transport = newUnkeyedRoundTripper(NewUnkeyedHTTPTransport())
	default:
		out.Transport = newUnkeyedRoundTripper(base)
	}
	return &out
}

// NotSentError is the proof that a request never left: the transport
// returned Err without ever obtaining a connection for it. UnkeyedClient's
// transport returns it (wrapped in the client's *url.Error);
// RequestNeverSent and ClassifyTransport accept it as proof.
//
// It is claimed only when the transport under UnkeyedClient is a
// *http.Transport, which reports every connection it obtains for a request
// through net/http/httptrace (ClientTrace.GotConn, for HTTP/1 and HTTP/2)
// before writing any byte of it, and the call failed with GotConn never
// called: a failed dial, DNS lookup, proxy CONNECT or TLS handshake, an
// invalid request, or a context that ended while waiting for a connection.
// Once a connection was obtained nothing is claimed, even if net/http
// reports that nothing was written: the request may have left. A
// transport of another type never yields a NotSentError, nor does an
// *http.Transport with a RoundTripper registered for "http" or "https"
// through RegisterProtocol (such a RoundTripper must call GotConn itself).
// When the client's Timeout ends the call, net/http replaces the error and
// the proof is lost: the call is then treated as possibly sent.
type NotSentError struct {
	// Err is the transport's error.
	Err error
}

func (e *NotSentError) Error() string { return "request not sent: " + e.Err.Error() }

func (e *NotSentError) Unwrap() error { return e.Err }

// unkeyedRoundTripper clears GetBody and proves "never sent" for its base.
type unkeyedRoundTripper struct {
	base http.RoundTripper
	// traced: base reports every connection it obtains through
	// httptrace.ClientTrace.GotConn before writing to it.
	traced bool
}

func newUnkeyedRoundTripper(base http.RoundTripper) *unkeyedRoundTripper {
	_, traced := base.(*http.Transport)
	return &unkeyedRoundTripper{base: base, traced: traced}
}

// RoundTrip sends a copy of req without GetBody, with a ClientTrace (added
// to any trace already in req's context) that records whether a connection
// was obtained.
func (t *unkeyedRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	var gotConn atomic.Bool
	trace := &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { gotConn.Store(true) }}
	out := req.WithContext(httptrace.WithClientTrace(req.Context(), trace))
	out.GetBody = nil
	resp, err := t.base.RoundTrip(out)
	if err != nil {
		if t.traced && !gotConn.Load() {
			return nil, &NotSentError{Err: err}
		}
		return nil, err
	}
	// The caller sees its own request, as http.RoundTripper requires.
	resp.Request = req
	return resp, nil
}

// CloseIdleConnections closes the base transport's idle connections, so
// that http.Client.CloseIdleConnections reaches it.
func (t *unkeyedRoundTripper) CloseIdleConnections() {
	type closeIdler interface{ CloseIdleConnections() }
	if c, ok := t.base.(closeIdler); ok {
		c.CloseIdleConnections()
	}
}
