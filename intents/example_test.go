package intents_test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
)

// A consumer of NoteCreated events stores the note's tags and records a
// notification email, once per event however often the broker delivers it.
func ExampleClient_Consume() {
	ctx := context.Background()
	pool, cleanup := exampleDatabase() // a migrated database, as `outboxd migrate` leaves it
	defer cleanup()

	email, _ := sendgridprovider.New(sendgridprovider.Config{}) // validation only: no key needed to record
	registry, _ := providers.NewRegistry(email)
	client, _ := intents.NewClient(pool, &intents.Config{Providers: registry})

	handle := func(ctx context.Context, tx pgx.Tx, rec *intents.Recorder) error {
		if _, err := tx.Exec(ctx, `INSERT INTO note_tags (note_id, tag) VALUES ('note-1', 'go')`); err != nil {
			return err
		}
		return rec.Record(intents.Intent{
			Kind:      sendgridprovider.KindEmail,
			Reference: "note-1",
			Payload: map[string]any{
				"from":    map[string]string{"email": "notes@example.com"},
				"to":      []map[string]string{{"email": "author@example.com"}},
				"subject": "Your note was tagged",
				"text":    "Tags: go",
			},
		})
	}

	msg := intents.Message{Consumer: "tagger", ID: "evt-note-1-created"}
	for range 2 { // the broker delivers twice
		res, err := client.Consume(ctx, msg, handle)
		if err != nil {
			fmt.Println("error:", err)
			return
		}
		if res.Duplicate {
			fmt.Println("duplicate: nothing ran")
			continue
		}
		fmt.Printf("processed: %d intent, key %s\n", len(res.Intents), res.Intents[0].Key)
	}
	// Output:
	// processed: 1 intent, key tagger:evt-note-1-created
	// duplicate: nothing ran
}

// An HTTP handler that creates a note records its notification in the same
// transaction: the outbox. If the transaction rolls back, no email is sent.
func ExampleClient_RecordTx() {
	ctx := context.Background()
	pool, cleanup := exampleDatabase()
	defer cleanup()

	email, _ := sendgridprovider.New(sendgridprovider.Config{})
	registry, _ := providers.NewRegistry(email)
	client, _ := intents.NewClient(pool, &intents.Config{Providers: registry})

	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO note_tags (note_id, tag) VALUES ('note-2', 'draft')`); err != nil {
			return err
		}
		recorded, err := client.RecordTx(ctx, tx, intents.Intent{
			Kind: sendgridprovider.KindEmail,
			Key:  "note-2-created", // stable: a retried request cannot send twice
			Payload: map[string]any{
				"from":    map[string]string{"email": "notes@example.com"},
				"to":      []map[string]string{{"email": "author@example.com"}},
				"subject": "Note created",
				"text":    "note-2",
			},
		})
		if err == nil {
			fmt.Println("recorded", recorded[0].Key)
		}
		return err
	})
	if err != nil {
		fmt.Println("error:", err)
	}
	// Output:
	// recorded note-2-created
}
