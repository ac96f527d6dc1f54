package adminhttp_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/outboxkit/outbox/intents/audit"
	"github.com/outboxkit/outbox/intents/intenttype"
)

func TestAPIBulkDryRunRunAndRefusals(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{token: testToken})
	ids := b.record(t, message("m-bulk", "billing", email("a", "r"), email("b", "r"), email("c", "r")))
	b.setState(t, ids[0], intenttype.StateInDoubt)
	b.setState(t, ids[1], intenttype.StateInDoubt)
	// ids[2] stays pending: a retry refuses it.
	post := func(body string) response {
		return b.do(t, req{method: "POST", path: "/api/v1/intents/bulk", body: body, header: map[string]string{"X-Actor": "alice"}})
	}
	before := b.dbState(t)
	for _, c := range []struct{ body, field string }{
		{`{"filter": {"state": ["in_doubt"]}, "action": "retry"}`, "reason"},
		{`{"filter": {}, "action": "retry", "reason": "x"}`, "filter.state"},
		{`{"filter": {"state": ["nope"]}, "action": "retry", "reason": "x"}`, "state"},
		{`{"filter": {"state": ["in_doubt"]}, "action": "explode", "reason": "x"}`, "action"},
		{`{"filter": {"state": ["in_doubt"]}, "action": "resolve", "reason": "x"}`, "as"},
	} {
		r := post(c.body)
		if _, field := r.errorFields(t); r.status != http.StatusBadRequest || field != c.field {
			t.Errorf("%s: %s, want 400 on %s", c.body, r, c.field)
		}
	}
	if after := b.dbState(t); after != before {
		t.Fatalf("refused bulk requests changed the database")
	}

	body := `{"filter": {"state": ["in_doubt", "pending"], "kind": ["sendgrid.email"]}, "action": "retry", "reason": "SendGrid outage", "dry_run": true}`
	r := post(body)
	var res audit.BulkResult
	if r.status != http.StatusOK {
		t.Fatalf("dry run: %s", r)
	}
	r.json(t, &res)
	if !res.DryRun || res.Matched != 3 || res.Would != 2 || res.Done != 0 || res.Refused != 1 {
		t.Errorf("dry run = %+v", res)
	}
	if after := b.dbState(t); after != before {
		t.Fatalf("a dry run changed the database")
	}
	// As the docs write it: one kind as a plain string, and "resend", the
	// CLI's and the dashboard's name for retry.
	r = post(`{"filter": {"state": ["in_doubt", "pending"], "kind": "sendgrid.email"}, "action": "resend", "reason": "SendGrid outage", "dry_run": true}`)
	var same audit.BulkResult
	if r.status != http.StatusOK {
		t.Fatalf("dry run with a plain-string kind and resend: %s", r)
	}
	r.json(t, &same)
	if same.Matched != res.Matched || same.Would != res.Would {
		t.Errorf("dry run with a plain-string kind = %+v, want as with a list: %+v", same, res)
	}

	r = post(strings.Replace(body, `"dry_run": true`, `"dry_run": false`, 1))
	if r.status != http.StatusOK {
		t.Fatalf("bulk retry: %s", r)
	}
	res = audit.BulkResult{}
	r.json(t, &res)
	if res.DryRun || res.Matched != 3 || res.Done != 2 || res.Refused != 1 || res.Errors != 0 {
		t.Errorf("bulk retry = %+v", res)
	}
	for _, id := range ids[:2] {
		var n int
		if err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox_intent_events WHERE intent_id = $1 AND actor = 'operator:alice' AND reason = 'SendGrid outage' AND to_state = 'pending'`, id).Scan(&n); err != nil || n != 1 {
			t.Errorf("intent %d: %d retry events (%v), want 1", id, n, err)
		}
		if st := b.intentState(t, id); st != intenttype.StatePending {
			t.Errorf("intent %d is %s after the retry", id, st)
		}
	}
	var n int
	if err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox_intent_events WHERE intent_id = $1`, ids[2]).Scan(&n); err != nil || n != 1 {
		t.Errorf("the refused intent has %d events (%v), want its recorded event only", n, err)
	}
}
