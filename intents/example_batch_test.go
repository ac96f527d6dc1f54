package intents_test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
)

// A consumer that pulls messages in batches processes a whole batch in one
// transaction: each message still once, a redelivered one reported as a
// duplicate without running its handler.
func ExampleClient_ConsumeBatch() {
	ctx := context.Background()
	pool, cleanup := exampleDatabase()
	defer cleanup()

	email, _ := sendgridprovider.New(sendgridprovider.Config{})
	registry, _ := providers.NewRegistry(email)
	client, _ := intents.NewClient(pool, &intents.Config{Providers: registry})

	handle := func(ctx context.Context, tx pgx.Tx, msg intents.Message, rec *intents.Recorder) error {
		if _, err := tx.Exec(ctx, `INSERT INTO note_tags (note_id, tag) VALUES ($1, 'go')`, msg.ID); err != nil {
			return err
		}
		return rec.Record(intents.Intent{
			Kind: sendgridprovider.KindEmail,
			Payload: map[string]any{
				"from":    map[string]string{"email": "notes@example.com"},
				"to":      []map[string]string{{"email": "author@example.com"}},
				"subject": "Your note was tagged",
				"text":    "Tags: go",
			},
		})
	}

	pull := func(ids ...string) []intents.Message {
		msgs := make([]intents.Message, len(ids))
		for i, id := range ids {
			msgs[i] = intents.Message{Consumer: "tagger", ID: id}
		}
		return msgs
	}
	for _, batch := range [][]intents.Message{pull("note-1", "note-2"), pull("note-2", "note-3")} {
		results, err := client.ConsumeBatch(ctx, batch, handle)
		if err != nil {
			fmt.Println("error:", err) // nothing of the batch was written: redeliver it
			return
		}
		for i, res := range results {
			if res.Duplicate {
				fmt.Printf("%s: duplicate\n", batch[i].ID)
				continue
			}
			fmt.Printf("%s: recorded %s\n", batch[i].ID, res.Intents[0].Key)
		}
	}
	// Output:
	// note-1: recorded tagger:note-1
	// note-2: recorded tagger:note-2
	// note-2: duplicate
	// note-3: recorded tagger:note-3
}
