package audit_test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/intents/audit"
	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/internal/testkit/pgtest"
	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
)

// An operator's tool, in Go: find what is pending for an order, cancel it
// with a reason, and read its history. Every action is checked against the
// state diagram and written to the event log; the same store backs
// `outboxd intents` and the admin API.
func ExampleStore_Cancel() {
	ctx := context.Background()
	pool, cleanup := pgtest.ExampleDB() // a migrated database, as `outboxd migrate` leaves it
	defer cleanup()

	email, _ := sendgridprovider.New(sendgridprovider.Config{}) // validation and redaction only
	registry, _ := providers.NewRegistry(email)
	client, _ := intents.NewClient(pool, &intents.Config{Providers: registry})
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := client.RecordTx(ctx, tx, intents.Intent{
			Kind: sendgridprovider.KindEmail, Key: "order-42-confirmation", Reference: "order-42",
			Payload: map[string]any{
				"from": map[string]string{"email": "shop@example.com"}, "to": []map[string]string{{"email": "buyer@example.com"}},
				"subject": "Order 42", "text": "Thanks",
			},
		})
		return err
	})
	if err != nil {
		fmt.Println("error:", err)
		return
	}

	store, err := audit.New(pool, registry)
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	page, _ := store.List(ctx, audit.Filter{Reference: "order-42", States: []intenttype.State{intenttype.StatePending}})
	id := page.Intents[0].ID
	if _, err := store.Cancel(ctx, id, "ann", "order withdrawn before dispatch"); err != nil {
		fmt.Println("error:", err)
		return
	}
	detail, _ := store.Get(ctx, "order-42-confirmation")
	for _, e := range detail.Events {
		fmt.Printf("%s: %s -> %s (%s)\n", e.Actor, e.FromState, e.ToState, e.Reason)
	}
	// Output:
	// recorder:  -> pending (recorded)
	// operator:ann: pending -> cancelled (order withdrawn before dispatch)
}
