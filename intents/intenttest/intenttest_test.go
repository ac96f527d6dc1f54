package intenttest_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/intents/intenttest"
	"github.com/outboxkit/outbox/internal/testkit/pgtest"
	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
)

func TestRequireRecorded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pgtest.NewDB(t)
	sg, err := sendgridprovider.New(sendgridprovider.Config{})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := providers.NewRegistry(sg)
	if err != nil {
		t.Fatal(err)
	}
	client, err := intents.NewClient(pool, &intents.Config{Providers: reg})
	if err != nil {
		t.Fatal(err)
	}
	email := json.RawMessage(`{"from": {"email": "a@example.com"}, "to": [{"email": "b@example.com"}], "subject": "s", "text": "t"}`)
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := client.ConsumeTx(ctx, tx, intents.Message{Consumer: "mailer", ID: "m1"}, func(ctx context.Context, tx pgx.Tx, rec *intents.Recorder) error {
			return rec.Record(intents.Intent{Kind: sendgridprovider.KindEmail, Payload: email, Reference: "r1"})
		}); err != nil {
			return err
		}
		// Visible inside the uncommitted transaction.
		got := intenttest.RequireRecorded(t, tx, "mailer", "m1", sendgridprovider.KindEmail)
		if got[0].Reference != "r1" || got[0].IdempotencyKey != "mailer:m1" || got[0].State != "pending" {
			t.Errorf("recorded intent = %+v", got[0])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	none, err := intenttest.Recorded(ctx, pool, "mailer", "other")
	if err != nil || len(none) != 0 {
		t.Fatalf("Recorded(other) = %v, %v; want nothing", none, err)
	}
}
