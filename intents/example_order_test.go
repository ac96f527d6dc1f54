package intents_test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/stripeprovider"
)

// A shop charges an order and refunds part of it in one message. The refund
// must never reach Stripe before the charge succeeded, and it needs the
// charge's PaymentIntent id, known only then: it comes after the charge
// and takes the id from its result. Both belong to the customer's stream,
// so they also wait for the customer's earlier effects.
func ExampleAfter() {
	ctx := context.Background()
	pool, cleanup := exampleDatabase()
	defer cleanup()
	stripe, _ := stripeprovider.New(stripeprovider.Config{}) // validation only: no key needed to record
	registry, _ := providers.NewRegistry(stripe)
	client, _ := intents.NewClient(pool, &intents.Config{Providers: registry})

	// readme:ordered begin
	handle := func(ctx context.Context, tx pgx.Tx, rec *intents.Recorder) error {
		err := rec.Record(intents.Intent{
			Kind: stripeprovider.KindPaymentIntent, Name: "charge", OrderingKey: "cus_42",
			Payload: stripeprovider.PaymentIntentPayload{Amount: new(int64(5000)), Currency: new("usd"),
				Customer: "cus_42", PaymentMethod: "pm_card_visa", Confirm: new(true)},
		})
		if err != nil {
			return err
		}
		// Performed once the charge succeeded, with its PaymentIntent id;
		// cancelled, saying why, if the charge fails.
		return rec.Record(intents.Intent{
			Kind: stripeprovider.KindRefund, Name: "refund", OrderingKey: "cus_42",
			Payload: stripeprovider.RefundPayload{Amount: new(int64(1500)), Reason: stripeprovider.ReasonRequestedByCustomer},
			After: []intents.After{{Name: "charge",
				Fill: map[string]string{"payment_intent": intents.ResultProviderRef}}},
		})
	}
	res, err := client.Consume(ctx, intents.Message{Consumer: "orders", ID: "order-42-refunded"}, handle)
	// readme:ordered end
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	for _, in := range res.Intents {
		var state string
		_ = pool.QueryRow(ctx, `SELECT state FROM outbox_intents WHERE id = $1`, in.ID).Scan(&state)
		fmt.Printf("%s: %s\n", in.Name, state)
	}
	// Output:
	// charge: pending
	// refund: waiting
}
