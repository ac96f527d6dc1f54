package stripeprovider_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"

	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/stripeprovider"
	"github.com/outboxkit/outbox/providers/stripeprovider/stripedouble"
)

// Perform one payment against the Stripe double, twice with the same key:
// Stripe (and the double) answer the second attempt from the first, so the
// customer is charged once.
func Example() {
	double, err := stripedouble.NewServer(stripedouble.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer double.Close()

	p, err := stripeprovider.New(stripeprovider.Config{APIKey: stripedouble.DefaultAPIKey, BaseURL: double.URL()})
	if err != nil {
		log.Fatal(err)
	}
	req := providers.Request{
		IntentID:       42,
		IdempotencyKey: "order-42-payment",
		Kind:           stripeprovider.KindPaymentIntent,
		Payload:        json.RawMessage(`{"amount": 1999, "currency": "usd", "payment_method": "pm_card_visa", "confirm": true}`),
		Attempt:        1,
	}
	for attempt := 1; attempt <= 2; attempt++ {
		req.Attempt = attempt
		res, err := p.Perform(context.Background(), req)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("attempt %d: HTTP %d, replayed %v\n", attempt, res.HTTPStatus, res.Replayed)
	}
	fmt.Println("payments for intent 42:", double.EffectsFor(42))
	// Output:
	// attempt 1: HTTP 200, replayed false
	// attempt 2: HTTP 200, replayed true
	// payments for intent 42: 1
}
