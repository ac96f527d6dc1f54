package sandbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/outboxkit/outbox/cmd/outboxd/internal/sandbox"
	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/fault"
	"github.com/outboxkit/outbox/providers/stripeprovider"
)

func TestTheRegistryCallsTheDoubles(t *testing.T) {
	t.Parallel()
	sb, err := sandbox.Start(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	pay(t, sb.Registry())
	if got := len(sb.Stripe().PaymentIntents()); got != 1 {
		t.Errorf("the Stripe double holds %d PaymentIntents, want 1", got)
	}
	if sb.StripeURL() != sb.Stripe().URL() {
		t.Errorf("StripeURL = %s without a front, want the double's %s", sb.StripeURL(), sb.Stripe().URL())
	}
	if err := sb.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if _, err := http.Get(sb.Stripe().URL() + "/_double/stats"); err == nil {
		t.Error("the Stripe double still answers after Close")
	}
}

func TestTheStripeFrontSeesTheAdaptersCalls(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	sb, err := sandbox.Start(&sandbox.Config{StripeFront: func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			next.ServeHTTP(w, r)
		})
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	pay(t, sb.Registry())
	if calls.Load() == 0 || sb.StripeURL() == sb.Stripe().URL() {
		t.Errorf("the front saw %d calls at %s (the double at %s), want the adapter's", calls.Load(), sb.StripeURL(), sb.Stripe().URL())
	}
	if got := len(sb.Stripe().PaymentIntents()); got != 1 {
		t.Errorf("the Stripe double holds %d PaymentIntents, want 1", got)
	}
}

func TestStartRefusesAnInjectorGivenTwice(t *testing.T) {
	t.Parallel()
	f := fault.New(1)
	_, err := sandbox.Start(&sandbox.Config{StripeFaults: f, SendGridFaults: f})
	if err == nil || !strings.Contains(err.Error(), "SendGridFaults") {
		t.Fatalf("Start with one injector for both doubles = %v, want it refused", err)
	}
}

func TestAnAddressTakenNamesTheDouble(t *testing.T) {
	t.Parallel()
	first, err := sandbox.Start(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	taken := strings.TrimPrefix(first.SendGrid().URL(), "http://")
	_, err = sandbox.Start(&sandbox.Config{SendGridAddr: taken})
	var de *sandbox.DoubleError
	if !errors.As(err, &de) || de.Double != sandbox.SendGrid || !strings.Contains(err.Error(), taken) {
		t.Fatalf("Start on a taken SendGrid address = %v, want a DoubleError naming SendGrid and %s", err, taken)
	}
}

func pay(t *testing.T, reg *providers.Registry) {
	t.Helper()
	p, err := reg.ForKind(stripeprovider.KindPaymentIntent)
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Perform(context.Background(), providers.Request{IntentID: 1, IdempotencyKey: "sandbox:1", Kind: stripeprovider.KindPaymentIntent, Attempt: 1,
		Payload: json.RawMessage(`{"amount": 500, "currency": "usd", "customer": "cus_1", "payment_method": "pm_card_visa", "confirm": true}`)})
	if err != nil || res.ProviderRef == "" {
		t.Fatalf("payment through the registry = %+v, %v", res, err)
	}
}
