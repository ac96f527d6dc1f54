package sendgridprovider_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"

	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
	"github.com/outboxkit/outbox/providers/sendgridprovider/sendgriddouble"
)

// Example sends one email through the adapter to the local SendGrid double
// and counts what the double accepted.
func Example() {
	double, err := sendgriddouble.NewServer(sendgriddouble.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer double.Close()

	p, err := sendgridprovider.New(sendgridprovider.Config{
		APIKey:  sendgriddouble.DefaultAPIKey, // in production: from the environment or a file
		BaseURL: double.URL(),
	})
	if err != nil {
		log.Fatal(err)
	}

	payload, _ := json.Marshal(sendgridprovider.Email{
		From:    &sendgridprovider.Address{Email: "shop@example.com", Name: "The Shop"},
		To:      []sendgridprovider.Address{{Email: "jane@example.com"}},
		Subject: "Welcome",
		Text:    "Hello Jane!",
	})
	if err := p.Validate(sendgridprovider.KindEmail, payload); err != nil {
		log.Fatal(err)
	}
	res, err := p.Perform(context.Background(), providers.Request{
		IntentID:       42,
		IdempotencyKey: "order-shipped-1234",
		Kind:           sendgridprovider.KindEmail,
		Payload:        payload,
		Attempt:        1,
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("HTTP status:", res.HTTPStatus)
	fmt.Println("emails accepted:", double.Stats().Emails)
	fmt.Println("emails for intent 42:", double.EffectsFor(42))
	// Output:
	// HTTP status: 202
	// emails accepted: 1
	// emails for intent 42: 1
}
