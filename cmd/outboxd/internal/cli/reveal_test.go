package cli_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/outboxkit/outbox/intents/intenttype"
)

func TestIntentsShowRevealIsRecorded(t *testing.T) {
	t.Parallel()
	db := newOperatorDB(t)
	db.setState(t, db.receipt, intenttype.StateInDoubt, "ambiguous: 502")
	id := fmt.Sprint(db.receipt)
	_, before := db.state(t, db.receipt)

	r := db.run(t, "intents", "show", id, "--reveal")
	if r.code != 2 || !strings.Contains(r.stderr, "--reason") {
		t.Errorf("--reveal without --reason: %s", r)
	}
	if _, events := db.state(t, db.receipt); events != before {
		t.Errorf("a refused reveal wrote an event")
	}

	r = db.run(t, "intents", "show", id, "--reveal", "--reason", "ticket 881: which address?")
	if r.code != 0 {
		t.Fatalf("intents show --reveal: %s", r)
	}
	wantContains(t, "intents show --reveal", r.stdout, "buyer@example.com", "payload (unredacted",
		"operator:alice", "in_doubt (unchanged)", "revealed payload: ticket 881: which address?")
	state, events := db.state(t, db.receipt)
	if state != intenttype.StateInDoubt || events != before+1 {
		t.Errorf("after a reveal: %s with %d events, want in_doubt with %d", state, events, before+1)
	}
	if r := db.run(t, "intents", "show", id); strings.Contains(r.stdout, "buyer@example.com") {
		t.Errorf("show without --reveal shows the recipient:\n%s", r.stdout)
	}
}
