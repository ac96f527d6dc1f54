package providers

import (
	"net/http"
	"testing"
)

// A client without a Transport gets an HTTP/1.1-only transport of its own,
// not http.DefaultTransport (HTTP/2, shared).
func TestUnkeyedClientDefaultsToAnHTTP1Transport(t *testing.T) {
	t.Parallel()
	for _, c := range []*http.Client{nil, {}} {
		rt, ok := UnkeyedClient(c).Transport.(*unkeyedRoundTripper)
		if !ok {
			t.Fatalf("Transport is %T, want the GetBody-clearing wrapper", UnkeyedClient(c).Transport)
		}
		base, ok := rt.base.(*http.Transport)
		if !ok || base == http.DefaultTransport || !rt.traced {
			t.Fatalf("base = %T (traced %t), want a new *http.Transport", rt.base, rt.traced)
		}
		if base.Protocols == nil || base.Protocols.HTTP2() || base.Protocols.UnencryptedHTTP2() || !base.Protocols.HTTP1() {
			t.Fatalf("base protocols = %v, want HTTP/1 only", base.Protocols)
		}
	}
}
