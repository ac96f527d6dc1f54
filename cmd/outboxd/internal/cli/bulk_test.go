package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/outboxkit/outbox/intents/audit"
	"github.com/outboxkit/outbox/intents/intenttype"
)

// rows is every intent row and event of db, to compare before and after.
func (db *operatorDB) rows(t *testing.T) string {
	t.Helper()
	var out string
	if err := db.pool.QueryRow(context.Background(), `SELECT (SELECT json_agg(i ORDER BY id)::text FROM outbox_intents i) ||
		(SELECT count(*) FROM outbox_intent_events)::text`).Scan(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestIntentsBulkResolve(t *testing.T) {
	t.Parallel()
	db := newOperatorDB(t)
	db.setState(t, db.receipt, intenttype.StateInDoubt, "ambiguous: 502")
	db.setState(t, db.notice, intenttype.StateInDoubt, "ambiguous: 502")
	bulk := []string{"intents", "resolve", "--state", "in_doubt,pending", "--kind", "sendgrid.email", "--as", "failed", "--reason", "SendGrid shows neither"}
	before := db.rows(t)

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"intents", "resolve", "--as", "failed", "--reason", "x"}, "give the intent's ID|KEY, or --state"},
		{[]string{"intents", "resolve", fmt.Sprint(db.receipt), "--state", "in_doubt", "--as", "failed", "--reason", "x"}, "not both"},
		{[]string{"intents", "resolve", "--kind", "sendgrid.email", "--as", "failed", "--reason", "x", "--yes"}, "--state is required"},
		{[]string{"intents", "resolve", "--state", "in_doubt", "--as", "failed"}, "--reason is required"},
		{[]string{"intents", "resolve", "--state", "in_doubt", "--as", "succeeded", "--provider-ref", "pi_1", "--reason", "x"}, "--provider-ref names one intent's effect"},
		{[]string{"intents", "resolve", fmt.Sprint(db.receipt), "--as", "failed", "--provider-ref", "pi_1", "--reason", "x"}, "provider_ref"},
		{bulk, "needs --yes when stdin is not a terminal"},
	} {
		r := db.run(t, c.args...)
		if r.code != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%v: %s\nwant exit 2 and %q", c.args, r, c.want)
		}
	}
	if after := db.rows(t); after != before {
		t.Fatalf("refused commands changed the database")
	}

	r := db.run(t, append(bulk, "--dry-run")...)
	if r.code != 0 {
		t.Fatalf("dry run: %s", r)
	}
	wantContains(t, "dry run", r.stdout, fmt.Sprintf("intent %d (sendgrid.email): in_doubt -> failed: would change", db.notice),
		fmt.Sprintf("intent %d (sendgrid.email): in_doubt -> failed: would change", db.receipt),
		"dry run, nothing changed: 2 matched, 2 would resolve, 0 would be refused")
	if after := db.rows(t); after != before {
		t.Fatalf("a dry run changed the database")
	}

	_, receiptEvents := db.state(t, db.receipt)
	r = db.run(t, append(bulk, "--yes", "--actor", "bob", "--json")...)
	if r.code != 0 {
		t.Fatalf("bulk resolve: %s", r)
	}
	var res audit.BulkResult
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || res.Matched != 2 || res.Done != 2 || res.Refused != 0 || len(res.Items) != 2 {
		t.Errorf("bulk resolve --json = %+v (%v)\n%s", res, err, r.stdout)
	}
	for _, id := range []int64{db.receipt, db.notice} {
		if state, events := db.state(t, id); state != intenttype.StateFailed || events != receiptEvents+1 {
			t.Errorf("intent %d: %s with %d events, want failed with %d", id, state, events, receiptEvents+1)
		}
	}
	if state, _ := db.state(t, db.payment); state != intenttype.StatePending {
		t.Errorf("the payment, not selected, is %s", state)
	}

	// Again: nothing is in_doubt now, so nothing matches.
	r = db.run(t, "intents", "retry", "--state", "in_doubt", "--reason", "again", "--yes")
	if r.code != 0 || !strings.Contains(r.stdout, "retry: 0 matched, 0 done, 0 refused, 0 errors") {
		t.Errorf("bulk retry of nothing: %s", r)
	}
	// A refusal is counted, changes nothing, and exits 1.
	before = db.rows(t)
	r = db.run(t, "intents", "retry", "--state", "failed,pending", "--reason", "again", "--yes")
	if r.code != 1 || !strings.Contains(r.stdout, "retry: 3 matched, 0 done, 3 refused, 0 errors") || !strings.Contains(r.stdout, "allowed only from in_doubt") {
		t.Errorf("bulk retry of failed and pending intents: %s", r)
	}
	if after := db.rows(t); after != before {
		t.Errorf("refused bulk retries changed the database")
	}
}
