package providers

import "net/http"

// DefaultMaxIdleConnsPerHost is how many idle connections to one provider
// NewHTTPTransport keeps: enough for a dispatcher's workers to reuse
// connections rather than open (and tear down) one per call, which
// net/http's default of 2 would make them do.
const DefaultMaxIdleConnsPerHost = 128

// NewHTTPTransport returns the transport HTTP adapters use for their default
// client: net/http's default settings (proxy from the environment, dial and
// TLS timeouts, HTTP/2) with DefaultMaxIdleConnsPerHost idle connections
// per host. Each adapter gets its own.
func NewHTTPTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 2 * DefaultMaxIdleConnsPerHost
	t.MaxIdleConnsPerHost = DefaultMaxIdleConnsPerHost
	return t
}
