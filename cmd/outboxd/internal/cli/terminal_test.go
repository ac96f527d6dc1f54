package cli_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/outboxkit/outbox/intents/intenttype"
)

// hostile is what a provider's 500 body or an event's reason may hold: it
// clears the screen, homes the cursor and rings the bell, then prints a
// line of its own.
const hostile = "\x1b[2J\x1b[H fake\a\r\u202e"

func TestTerminalOutputHasNoControlCharacters(t *testing.T) {
	t.Parallel()
	db := newOperatorDB(t)
	ctx := context.Background()
	db.setState(t, db.receipt, intenttype.StateInDoubt, "provider said: "+hostile)
	if _, err := db.pool.Exec(ctx, `INSERT INTO outbox_attempts (intent_id, attempt, started_at, finished_at, outcome, provider_ref, error)
		VALUES ($1, 1, now(), now(), 'ambiguous', $2, $3)`, db.receipt, "msg-"+hostile, "500: "+hostile); err != nil {
		t.Fatal(err)
	}
	if _, err := db.pool.Exec(ctx, `INSERT INTO outbox_events (intent_id, actor, from_state, to_state, reason)
		VALUES ($1, $2, 'dispatching', 'in_doubt', $3)`, db.receipt, "dispatcher"+hostile, "reason "+hostile); err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprint(db.receipt)
	for _, args := range [][]string{{"intents", "show", id}, {"intents", "list"}, {"intents", "list", "--state", "in_doubt"}} {
		r := db.run(t, args...)
		if r.code != 0 {
			t.Fatalf("%v: %s", args, r)
		}
		for _, bad := range []string{"\x1b", "\a", "\r", "\u202e"} {
			if strings.Contains(r.stdout, bad) {
				t.Errorf("%v: stdout holds %q:\n%q", args, bad, r.stdout)
			}
		}
		wantContains(t, fmt.Sprint(args), r.stdout, `\x1b[2J\x1b[H fake\x07`)
	}
	r := db.run(t, "intents", "show", id)
	wantContains(t, "intents show", r.stdout, "how to check at the provider (sendgrid)", "https://app.sendgrid.com/email_activity",
		"unique_args['", "provider said: ", "500: ", "reason ", "msg-", "dispatcher")
	// JSON output keeps the bytes exactly (encoding/json escapes them).
	r = db.run(t, "intents", "show", id, "--json")
	if r.code != 0 || strings.Contains(r.stdout, "\x1b") || !strings.Contains(r.stdout, `\u001b[2J`) {
		t.Errorf("intents show --json: %s", r)
	}
}
