package stripeprovider_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"reflect"

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

// A payload built in Go: new gives the optional fields their values. It is
// the same payload as the one written as JSON or as a map, stored and sent
// to Stripe alike, and validated the same.
func ExamplePaymentIntentPayload() {
	// readme:payment-payload begin
	typed := stripeprovider.PaymentIntentPayload{Amount: new(int64(500)), Currency: new("usd"),
		Customer: "cus_42", PaymentMethod: "pm_card_visa", Confirm: new(true)}
	// readme:payment-payload end
	asJSON := `{"amount": 500, "currency": "usd", "customer": "cus_42", "payment_method": "pm_card_visa", "confirm": true}`

	raw, err := json.Marshal(typed)
	if err != nil {
		log.Fatal(err)
	}
	var fromGo, fromJSON map[string]any
	if err := json.Unmarshal(raw, &fromGo); err != nil {
		log.Fatal(err)
	}
	if err := json.Unmarshal([]byte(asJSON), &fromJSON); err != nil {
		log.Fatal(err)
	}
	p, err := stripeprovider.New(stripeprovider.Config{}) // validation only: no key needed
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(raw))
	fmt.Println("the same payload:", reflect.DeepEqual(fromGo, fromJSON), "valid:", p.Validate(stripeprovider.KindPaymentIntent, raw) == nil)
	// Output:
	// {"amount":500,"currency":"usd","customer":"cus_42","payment_method":"pm_card_visa","confirm":true}
	// the same payload: true valid: true
}
