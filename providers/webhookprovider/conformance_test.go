package webhookprovider_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/providertest"
	"github.com/outboxkit/outbox/providers/webhookprovider"
	"github.com/outboxkit/outbox/providers/webhookprovider/webhookdouble"
)

// testSecret is long and distinctive so that a leak is easy to spot.
const testSecret = "whsec_TopSecretSigningKeyThatMustNeverLeak_0123456789"

const keyHeader = "Idempotency-Key"

func newDouble(t *testing.T, cfg webhookdouble.Config) *webhookdouble.Server {
	t.Helper()
	if cfg.Secret == "" {
		cfg.Secret = testSecret
	}
	d, err := webhookdouble.NewServer(cfg)
	if err != nil {
		t.Fatalf("webhookdouble.NewServer: %v", err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// endpoint returns the "orders" endpoint at baseURL, keyed or not.
func endpoint(baseURL string, keyed bool) webhookprovider.Endpoint {
	ep := webhookprovider.Endpoint{URL: baseURL + "/hooks/orders?token=path-token-9876", Secret: testSecret, Timeout: 5 * time.Second}
	if keyed {
		ep.IdempotencyHeader = keyHeader
		ep.KeyWindow = 24 * time.Hour
	}
	return ep
}

func newProvider(t *testing.T, baseURL string, keyed bool) *webhookprovider.Provider {
	t.Helper()
	p, err := webhookprovider.New(webhookprovider.Config{Endpoints: map[string]webhookprovider.Endpoint{"orders": endpoint(baseURL, keyed)}})
	if err != nil {
		t.Fatalf("webhookprovider.New: %v", err)
	}
	return p
}

const validPayload = `{"endpoint": "orders", "event": "order.paid", "data": {"order_id": 42, "customer_email": "jane.doe@example.com", "contact": "bob@example.org", "items": [{"sku": "A1"}]}}`

func harness(keyed bool) providertest.Harness {
	headerName := ""
	if keyed {
		headerName = keyHeader
	}
	return providertest.Harness{
		NewDouble: func(t *testing.T) providertest.Double {
			return newDouble(t, webhookdouble.Config{IdempotencyHeader: headerName})
		},
		NewProvider: func(t *testing.T, baseURL string) providers.Provider {
			return newProvider(t, baseURL, keyed)
		},
		// A webhook cannot be asked what it received: no reconcile.
		Features:     providertest.Features{HTTPFaults: true, RejectsPayload: true},
		Kind:         webhookprovider.KindPost,
		ValidPayload: json.RawMessage(validPayload),
		InvalidPayloads: map[string]string{
			`{"event": "a.b", "data": {}}`:                                      "endpoint",
			`{"endpoint": "", "event": "a.b", "data": {}}`:                      "endpoint",
			`{"endpoint": "nope", "event": "a.b", "data": {}}`:                  "endpoint",
			`{"endpoint": 5, "event": "a.b", "data": {}}`:                       "endpoint",
			`{"endpoint": "orders", "data": {}}`:                                "event",
			`{"endpoint": "orders", "event": "has space", "data": {}}`:          "event",
			`{"endpoint": "orders", "event": ["a"], "data": {}}`:                "event",
			`{"endpoint": "orders", "event": "a.b"}`:                            "data",
			`{"endpoint": "orders", "event": "a.b", "data": null}`:              "data",
			`{"endpoint": "orders", "event": "a.b", "data": {}, "extra": true}`: "extra",
		},
		RejectedPayload: json.RawMessage(`{"endpoint": "orders", "event": "` + webhookdouble.RejectedEvent + `", "data": {}}`),
		SensitiveValues: []string{"jane.doe@example.com", "bob@example.org"},
	}
}

func TestConformanceKeyed(t *testing.T) {
	t.Parallel()
	providertest.Run(t, harness(true))
}

func TestConformanceUnkeyed(t *testing.T) {
	t.Parallel()
	providertest.Run(t, harness(false))
}
