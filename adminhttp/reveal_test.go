package adminhttp_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/outboxkit/outbox/intents/audit"
	"github.com/outboxkit/outbox/intents/intenttype"
)

func TestAPIRevealIsAuditedAndChangesNoState(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{token: testToken})
	id := b.record(t, message("m-reveal", "billing", email("receipt", "order-9")))[0]
	b.setState(t, id, intenttype.StateInDoubt)
	path := fmt.Sprintf("/api/v1/intents/%d/reveal", id)
	before := b.dbState(t)

	for _, c := range []struct {
		name string
		rq   req
		want int
	}{
		{"no token", req{method: "POST", path: path, body: `{"reason": "x"}`, noAuth: true}, http.StatusUnauthorized},
		{"no reason", req{method: "POST", path: path, body: `{"reason": " "}`}, http.StatusBadRequest},
		{"no body", req{method: "POST", path: path}, http.StatusBadRequest},
		{"no such intent", req{method: "POST", path: "/api/v1/intents/987654/reveal", body: `{"reason": "x"}`}, http.StatusNotFound},
	} {
		if r := b.do(t, c.rq); r.status != c.want {
			t.Errorf("%s: %s, want %d", c.name, r, c.want)
		}
	}
	if after := b.dbState(t); after != before {
		t.Errorf("refused reveals changed the database:\n%s\n->\n%s", before, after)
	}

	r := b.do(t, req{method: "POST", path: path, body: `{"reason": "ticket 881"}`, header: map[string]string{"X-Actor": "alice"}, revealOK: true})
	if r.status != http.StatusOK {
		t.Fatalf("reveal: %s", r)
	}
	var d audit.Detail
	r.json(t, &d)
	if !strings.Contains(string(d.Intent.Payload), receiptEmail) && !strings.Contains(string(d.Intent.Payload), recipientEmail) {
		t.Errorf("reveal does not show the recipient: %s", d.Intent.Payload)
	}
	last := d.Events[len(d.Events)-1]
	if last.Actor != "operator:alice" || last.FromState != intenttype.StateInDoubt || last.ToState != intenttype.StateInDoubt || last.Reason != "revealed payload: ticket 881" {
		t.Errorf("reveal event = %+v", last)
	}
	if st := b.intentState(t, id); st != intenttype.StateInDoubt {
		t.Errorf("after a reveal the intent is %s", st)
	}
	var n int
	if err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox_intent_events WHERE intent_id = $1 AND reason LIKE 'revealed payload:%'`, id).Scan(&n); err != nil || n != 1 {
		t.Errorf("reveal events = %d (%v), want 1", n, err)
	}
}
