package stripeprovider_test

import (
	"encoding/json"
	"testing"

	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/providertest"
	"github.com/outboxkit/outbox/providers/stripeprovider"
	"github.com/outboxkit/outbox/providers/stripeprovider/stripedouble"
)

func newDouble(t *testing.T, cfg stripedouble.Config) *stripedouble.Server {
	t.Helper()
	d, err := stripedouble.NewServer(cfg)
	if err != nil {
		t.Fatalf("stripedouble.NewServer: %v", err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

func newProvider(t *testing.T, baseURL string) *stripeprovider.Provider {
	t.Helper()
	p, err := stripeprovider.New(stripeprovider.Config{APIKey: stripedouble.DefaultAPIKey, BaseURL: baseURL})
	if err != nil {
		t.Fatalf("stripeprovider.New: %v", err)
	}
	return p
}

const validPayload = `{"amount": 2500, "currency": "usd", "customer": "cus_123", "payment_method": "pm_card_visa", "confirm": true,
 "description": "order 42", "receipt_email": "jane.doe@example.com", "metadata": {"order_id": "42"}}`

func TestConformance(t *testing.T) {
	providertest.Run(t, providertest.Harness{
		NewDouble: func(t *testing.T) providertest.Double {
			return newDouble(t, stripedouble.Config{})
		},
		NewProvider: func(t *testing.T, baseURL string) providers.Provider {
			return newProvider(t, baseURL)
		},
		// Stripe's lists read consistently: a search that finds nothing
		// proves the object absent.
		Features:     providertest.Features{HTTPFaults: true, Reconciles: true, ProvesAbsence: true, RejectsPayload: true},
		Kind:         stripeprovider.KindPaymentIntent,
		ValidPayload: json.RawMessage(validPayload),
		InvalidPayloads: map[string]string{
			`{"currency": "usd"}`:                                                                              "amount",
			`{"amount": -5, "currency": "usd"}`:                                                                "amount",
			`{"amount": 0, "currency": "usd"}`:                                                                 "amount",
			`{"amount": "100", "currency": "usd"}`:                                                             "amount",
			`{"amount": 1.5, "currency": "usd"}`:                                                               "amount",
			`{"amount": 100}`:                                                                                  "currency",
			`{"amount": 100, "currency": "USD"}`:                                                               "currency",
			`{"amount": 100, "currency": "dollars"}`:                                                           "currency",
			`{"amount": 100, "currency": "usd", "metadata": {"intent_id": "1"}}`:                               "metadata.intent_id",
			`{"amount": 100, "currency": "usd", "metadata": {"outbox_key": "k"}}`:                              "metadata.outbox_key",
			`{"amount": 100, "currency": "usd", "metadata": {"outbox_namespace": "n"}}`:                        "metadata.outbox_namespace",
			`{"amount": 100, "currency": "usd", "receipt_email": "not-an-email"}`:                              "receipt_email",
			`{"amount": 100, "currency": "usd", "customer": "acct_1"}`:                                         "customer",
			`{"amount": 100, "currency": "usd", "statement_descriptor_suffix": "this is far too long for it"}`: "statement_descriptor_suffix",
			`{"amount": 100, "currency": "usd", "metadata": {"k": 5}}`:                                         "metadata",
		},
		RejectedPayload: json.RawMessage(`{"amount": 2500, "currency": "usd", "payment_method": "` + stripedouble.DeclinedCard + `", "confirm": true}`),
		SensitiveValues: []string{"jane.doe@example.com"},
		RecordedMetadata: func(d providertest.Double) []map[string]string {
			var out []map[string]string
			for _, pi := range d.(*stripedouble.Server).PaymentIntents() {
				out = append(out, pi.Metadata)
			}
			return out
		},
	})
}

// seededPI is the charge the refund conformance suite refunds: every
// fresh double holds it, succeeded for far more than the suite refunds.
const seededPI = "pi_conformanceCharge"

func TestConformanceRefund(t *testing.T) {
	providertest.Run(t, providertest.Harness{
		NewDouble: func(t *testing.T) providertest.Double {
			d := newDouble(t, stripedouble.Config{})
			if _, ok := d.SeedPaymentIntent(stripedouble.PaymentIntent{ID: seededPI, Amount: 1000000, Currency: "usd"}); !ok {
				t.Fatal("seeding the charge failed")
			}
			return d
		},
		NewProvider: func(t *testing.T, baseURL string) providers.Provider {
			return newProvider(t, baseURL)
		},
		// Stripe's lists read consistently: a search that finds nothing
		// proves the object absent.
		Features:     providertest.Features{HTTPFaults: true, Reconciles: true, ProvesAbsence: true, RejectsPayload: true},
		Kind:         stripeprovider.KindRefund,
		ValidPayload: json.RawMessage(`{"payment_intent": "` + seededPI + `", "amount": 100, "reason": "requested_by_customer", "metadata": {"customer_email": "jane.doe@example.com"}}`),
		InvalidPayloads: map[string]string{
			`{"amount": 100}`:                                             "payment_intent",
			`{"payment_intent": "ch_1"}`:                                  "payment_intent",
			`{"payment_intent": "pi_1", "amount": 0}`:                     "amount",
			`{"payment_intent": "pi_1", "amount": "100"}`:                 "amount",
			`{"payment_intent": "pi_1", "reason": "bored"}`:               "reason",
			`{"payment_intent": "pi_1", "metadata": {"outbox_key": "k"}}`: "metadata.outbox_key",
		},
		// More than was charged: Stripe refuses it for good.
		RejectedPayload: json.RawMessage(`{"payment_intent": "` + seededPI + `", "amount": 99999999}`),
		SensitiveValues: []string{"jane.doe@example.com"},
		RecordedMetadata: func(d providertest.Double) []map[string]string {
			var out []map[string]string
			for _, rf := range d.(*stripedouble.Server).Refunds() {
				out = append(out, rf.Metadata)
			}
			return out
		},
	})
}
