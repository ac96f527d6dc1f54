package webhookprovider_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/internal/resetserver"
	"github.com/outboxkit/outbox/providers/webhookprovider"
)

func startResetServer(t *testing.T, cfg resetserver.Config) *resetserver.Server {
	t.Helper()
	s, err := resetserver.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func resetProvider(t *testing.T, s *resetserver.Server, transport *http.Transport, endpoints map[string]bool) *webhookprovider.Provider {
	t.Helper()
	transport.TLSClientConfig = s.ClientTLSConfig()
	t.Cleanup(transport.CloseIdleConnections)
	cfg := webhookprovider.Config{Endpoints: map[string]webhookprovider.Endpoint{}, HTTPClient: &http.Client{Transport: transport}}
	for name, keyed := range endpoints {
		cfg.Endpoints[name] = endpoint(s.URL(), keyed)
	}
	p, err := webhookprovider.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// An unkeyed provider delivers once when the receiver resets the stream
// after reading the body, even through a caller's HTTP/2 client, and the
// attempt is ambiguous.
func TestUnkeyedDeliveryIsSentOnceAfterAReset(t *testing.T) {
	t.Parallel()
	transports := []struct {
		name  string
		new   func() *http.Transport
		proto string
	}{
		{"UnkeyedTransport", providers.NewUnkeyedHTTPTransport, "HTTP/1.1"},
		{"CallersHTTP2Transport", providers.NewHTTPTransport, "HTTP/2.0"},
	}
	modes := map[string]resetserver.Mode{"RefusedStream": resetserver.RefusedStream, "GoAway": resetserver.GoAway}
	for _, tr := range transports {
		for modeName, mode := range modes {
			t.Run(tr.name+"/"+modeName, func(t *testing.T) {
				t.Parallel()
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				s := startResetServer(t, resetserver.Config{Mode: mode})
				p := resetProvider(t, s, tr.new(), map[string]bool{"orders": false})
				_, err := p.Perform(ctx, request(9, "consumer:m9", payload))
				ae := attemptErr(t, err)
				if ae.Outcome != providers.OutcomeAmbiguous || ae.DidNotAct {
					t.Fatalf("classified %+v, want ambiguous, may have acted", ae)
				}
				got := s.Deliveries()
				if len(got) != 1 || got[0].Proto != tr.proto || got[0].Path != "/hooks/orders" {
					t.Fatalf("the receiver got %+v, want one %s delivery to /hooks/orders", got, tr.proto)
				}
			})
		}
	}
}

// A provider with one keyed and one unkeyed endpoint is unkeyed, yet the
// keyed endpoint's Idempotency-Key header makes net/http's HTTP/1 client
// treat the POST as replayable after a broken keep-alive connection. The
// provider must not let it.
func TestMixedProviderDoesNotReplayOnAKeepAliveConnection(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s := startResetServer(t, resetserver.Config{Mode: resetserver.RefusedStream, Drop: func(n int) bool { return n == 2 }})
	p := resetProvider(t, s, providers.NewUnkeyedHTTPTransport(), map[string]bool{"orders": true, "audit": false})
	if p.Capabilities().IdempotencyKeys {
		t.Fatal("a provider with an unkeyed endpoint declares keys")
	}
	if _, err := p.Perform(ctx, request(1, "consumer:m1", payload)); err != nil {
		t.Fatalf("first delivery: %v", err)
	}
	// Reuses the first delivery's connection, which the receiver resets
	// after reading this one.
	_, err := p.Perform(ctx, request(2, "consumer:m2", payload))
	if ae := attemptErr(t, err); ae.Outcome != providers.OutcomeAmbiguous || ae.DidNotAct {
		t.Fatalf("classified %+v, want ambiguous, may have acted", ae)
	}
	if n := len(s.Deliveries()); n != 2 {
		t.Fatalf("the receiver got %d deliveries, want 2 (one per Perform)", n)
	}
}

// A keyed provider keeps the caller's client as it is: net/http may repeat a
// delivery, and the receiver's key store answers the repeat.
func TestKeyedProviderLeavesRetriesToTheKey(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s := startResetServer(t, resetserver.Config{Mode: resetserver.RefusedStream})
	p := resetProvider(t, s, providers.NewHTTPTransport(), map[string]bool{"orders": true})
	res, err := p.Perform(ctx, request(3, "consumer:m3", payload))
	if err != nil || res.HTTPStatus != http.StatusAccepted {
		t.Fatalf("Perform = %+v, %v; want net/http's retry to be answered 202", res, err)
	}
	if n := len(s.Deliveries()); n != 2 {
		t.Fatalf("the receiver got %d deliveries, want 2 (the same key twice)", n)
	}
}
