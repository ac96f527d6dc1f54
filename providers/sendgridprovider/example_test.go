package sendgridprovider_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log"
	"strconv"

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

// Example_dynamicTemplate sends a receipt from a dynamic template to two
// groups of recipients, with a PDF attached: the data shared by everyone is
// given once, and each personalization overrides what differs. The double
// counts one email per recipient and keeps the data each was rendered with.
func Example_dynamicTemplate() {
	double, err := sendgriddouble.NewServer(sendgriddouble.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer double.Close()
	p, err := sendgridprovider.New(sendgridprovider.Config{APIKey: sendgriddouble.DefaultAPIKey, BaseURL: double.URL()})
	if err != nil {
		log.Fatal(err)
	}

	data := func(v string) json.RawMessage { return json.RawMessage(strconv.Quote(v)) }
	payload, _ := json.Marshal(sendgridprovider.Email{
		From:       &sendgridprovider.Address{Email: "shop@example.com", Name: "The Shop"},
		TemplateID: "d-4ad23ad40a0e47d0a0232b85f24ca5c2",
		DynamicTemplateData: map[string]json.RawMessage{
			"order":    data("1234"),
			"greeting": data("Hello"),
		},
		Personalizations: []sendgridprovider.Personalization{
			{
				To:                  []sendgridprovider.Address{{Email: "jane@example.com", Name: "Jane"}},
				Cc:                  []sendgridprovider.Address{{Email: "accounts@example.com"}},
				DynamicTemplateData: map[string]json.RawMessage{"greeting": data("Hi Jane")},
			},
			{To: []sendgridprovider.Address{{Email: "warehouse@example.com"}}},
		},
		Attachments: []sendgridprovider.Attachment{{
			Content:  base64.StdEncoding.EncodeToString([]byte("%PDF-1.4 ...")),
			Filename: "receipt-1234.pdf",
			Type:     "application/pdf",
		}},
	})
	if err := p.Validate(sendgridprovider.KindEmail, payload); err != nil {
		log.Fatal(err)
	}
	if _, err := p.Perform(context.Background(), providers.Request{
		IntentID: 43, IdempotencyKey: "order-1234-receipt", Kind: sendgridprovider.KindEmail, Payload: payload, Attempt: 1,
	}); err != nil {
		log.Fatal(err)
	}
	fmt.Println("emails for intent 43:", double.DeliveriesFor(43))
	for _, d := range double.Deliveries() {
		fmt.Println(d.Recipient, d.Data()["greeting"], d.Data()["order"], d.Attachments)
	}
	// Output:
	// emails for intent 43: 3
	// jane@example.com Hi Jane 1234 [receipt-1234.pdf]
	// accounts@example.com Hi Jane 1234 [receipt-1234.pdf]
	// warehouse@example.com Hello 1234 [receipt-1234.pdf]
}
