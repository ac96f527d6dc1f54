package audit_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/outboxkit/outbox/intents/audit"
	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
)

func TestRevealShowsThePayloadAndRecordsWhoAndWhy(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	id := b.record(t, "billing", "reveal", "", sendgridprovider.KindEmail, emailPayload)
	b.setState(t, id, intenttype.StateInDoubt)

	d, err := b.store.Get(ctx, fmt.Sprint(id))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(d.Intent.Payload), recipientEmail) {
		t.Fatalf("Get shows the recipient: %s", d.Intent.Payload)
	}

	// Refused without an actor or a reason: nothing is written.
	before := b.snapshot(t, id)
	for _, c := range []struct{ actor, reason, field string }{{"ann", "", "reason"}, {"", "look it up", "actor"}, {"ann", "bad\x1b[2J", "reason"}} {
		_, err := b.store.Reveal(ctx, fmt.Sprint(id), c.actor, c.reason)
		var fe *audit.FieldError
		if !errors.As(err, &fe) || fe.Field != c.field || !errors.Is(err, audit.ErrInvalidInput) {
			t.Errorf("Reveal(%q, %q) = %v, want a FieldError on %s", c.actor, c.reason, err, c.field)
		}
	}
	if _, err := b.store.Reveal(ctx, "987654", "ann", "why"); !errors.Is(err, audit.ErrNotFound) {
		t.Errorf("Reveal of no intent = %v, want ErrNotFound", err)
	}
	if after := b.snapshot(t, id); after != before {
		t.Errorf("refused reveals changed the intent: %+v -> %+v", before, after)
	}

	d, err = b.store.Reveal(ctx, fmt.Sprint(id), "ann", "customer asks whether the receipt went out")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(d.Intent.Payload), recipientEmail) {
		t.Errorf("Reveal does not show the recipient: %s", d.Intent.Payload)
	}
	after := b.snapshot(t, id)
	if after.Row != before.Row || after.Events != before.Events+1 || after.Dispatchable != before.Dispatchable {
		t.Errorf("Reveal changed more than one event: %+v -> %+v", before, after)
	}
	e := b.lastEvent(t, id)
	if e.Actor != "operator:ann" || e.FromState != intenttype.StateInDoubt || e.ToState != intenttype.StateInDoubt ||
		e.Reason != "revealed payload: customer asks whether the receipt went out" {
		t.Errorf("reveal event = %+v", e)
	}
	if last := d.Events[len(d.Events)-1]; last.ID != e.ID {
		t.Errorf("Reveal's detail does not end with its own event: %+v", d.Events)
	}
}
