package adminhttp_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/outboxkit/outbox/intents/audit"
	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/internal/testkit"
)

func TestAPIListGetAndStats(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{token: testToken})

	order1 := b.record(t, message("order-1", "billing", payment("payment", "order-1"), email("receipt", "order-1")))
	order2 := b.record(t, message("order-2", "billing", payment("payment", "order-2")))
	ship := b.record(t, message("order-1", "shipping", email("", "order-1")))
	b.setState(t, order1[1], intenttype.StateInDoubt)
	b.setState(t, ship[0], intenttype.StateInDoubt)
	b.setState(t, order2[0], intenttype.StateSucceeded)

	list := func(query string) []int64 {
		t.Helper()
		r := b.do(t, req{path: "/api/v1/intents?" + query})
		if r.status != http.StatusOK {
			t.Fatalf("GET /api/v1/intents?%s: %s", query, r)
		}
		var page audit.Page
		r.json(t, &page)
		ids := []int64{}
		for _, in := range page.Intents {
			ids = append(ids, in.ID)
		}
		return ids
	}
	for _, tc := range []struct {
		query string
		want  []int64
	}{
		{"", []int64{ship[0], order2[0], order1[1], order1[0]}},
		{"state=in_doubt", []int64{ship[0], order1[1]}},
		{"state=in_doubt&state=succeeded", []int64{ship[0], order2[0], order1[1]}},
		{"state=pending,succeeded", []int64{order2[0], order1[0]}},
		{"kind=sendgrid.email", []int64{ship[0], order1[1]}},
		{"provider=stripe", []int64{order2[0], order1[0]}},
		{"consumer=shipping", []int64{ship[0]}},
		{"message_id=order-1", []int64{ship[0], order1[1], order1[0]}},
		{"reference=order-2", []int64{order2[0]}},
		{"since=1h&until=" + url.QueryEscape("2999-01-01T00:00:00Z"), []int64{ship[0], order2[0], order1[1], order1[0]}},
		{"until=2000-01-01", []int64{}},
		{"state=&kind=", []int64{ship[0], order2[0], order1[1], order1[0]}}, // empty form fields do not filter
	} {
		if got := list(tc.query); fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("GET /api/v1/intents?%s = %v, want %v", tc.query, got, tc.want)
		}
	}

	// Pages of one, followed by cursor, visit every intent once.
	var seen []int64
	query := "limit=1"
	for range 10 {
		r := b.do(t, req{path: "/api/v1/intents?" + query})
		var page audit.Page
		r.json(t, &page)
		for _, in := range page.Intents {
			seen = append(seen, in.ID)
		}
		if page.NextCursor == "" {
			break
		}
		query = "limit=1&cursor=" + url.QueryEscape(page.NextCursor)
	}
	if want := []int64{ship[0], order2[0], order1[1], order1[0]}; fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Errorf("paging by 1 visited %v, want %v", seen, want)
	}

	// One intent by id and by key, with its attempts and events.
	var byID, byKey audit.Detail
	r := b.do(t, req{path: fmt.Sprintf("/api/v1/intents/%d", order1[1])})
	if r.status != http.StatusOK {
		t.Fatalf("GET by id: %s", r)
	}
	r.json(t, &byID)
	if byID.Intent.ID != order1[1] || byID.Intent.State != intenttype.StateInDoubt || len(byID.Attempts) != 1 || len(byID.Events) != 2 {
		t.Errorf("GET by id = %+v", byID)
	}
	if c := byID.HowToCheck; c.Provider != "sendgrid" || c.URL != "https://app.sendgrid.com/email_activity" || c.Search == "" || c.Note == "" {
		t.Errorf("GET by id: how_to_check = %+v", c)
	}
	r = b.do(t, req{path: "/api/v1/intents/" + url.PathEscape(byID.Intent.IdempotencyKey)})
	if r.status != http.StatusOK {
		t.Fatalf("GET by key %q: %s", byID.Intent.IdempotencyKey, r)
	}
	r.json(t, &byKey)
	if byKey.Intent.ID != order1[1] {
		t.Errorf("GET by key found intent %d, want %d", byKey.Intent.ID, order1[1])
	}

	var stats audit.Stats
	r = b.do(t, req{path: "/api/v1/stats"})
	if r.status != http.StatusOK {
		t.Fatalf("GET /api/v1/stats: %s", r)
	}
	r.json(t, &stats)
	if stats.InDoubt != 2 || stats.ByState[intenttype.StatePending] != 1 || stats.ByState[intenttype.StateSucceeded] != 1 {
		t.Errorf("stats = %+v", stats)
	}
}

func TestAPIActionsChangeStateAndRecordWhoAndWhy(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{token: testToken})
	ids := b.record(t, message("m-1", "billing", email("a", "r"), email("b", "r"), email("c", "r"), email("d", "r")))
	resend, resolve, cancelDoubt, cancelPending := ids[0], ids[1], ids[2], ids[3]
	for _, id := range ids[:3] {
		b.setState(t, id, intenttype.StateInDoubt)
	}

	act := func(id int64, action, body string, header map[string]string) intenttype.Intent {
		t.Helper()
		r := b.do(t, req{method: "POST", path: fmt.Sprintf("/api/v1/intents/%d/%s", id, action), body: body, header: header})
		if r.status != http.StatusOK {
			t.Fatalf("POST %s %d: %s", action, id, r)
		}
		var out struct{ Intent intenttype.Intent }
		r.json(t, &out)
		return out.Intent
	}
	if in := act(resend, "retry", `{"reason": "SendGrid activity shows no such email"}`, map[string]string{"X-Actor": "alice"}); in.State != intenttype.StatePending {
		t.Errorf("retry answered state %s, want pending", in.State)
	}
	if in := act(resolve, "resolve", `{"reason": "seen in the activity feed", "as": "succeeded"}`, nil); in.State != intenttype.StateSucceeded {
		t.Errorf("resolve answered state %s, want succeeded", in.State)
	}
	// An in_doubt intent may have acted: it is resolved, never cancelled.
	if r := b.do(t, req{method: "POST", path: fmt.Sprintf("/api/v1/intents/%d/cancel", cancelDoubt), body: `{"reason": "customer withdrew", "if_state": "in_doubt"}`}); r.status != http.StatusConflict || !strings.Contains(r.body, "allowed only from pending") {
		t.Errorf("POST cancel of an in_doubt intent: %s, want 409", r)
	}
	act(cancelPending, "cancel", "", nil) // no body: no reason

	for id, want := range map[int64]intenttype.State{resend: intenttype.StatePending, resolve: intenttype.StateSucceeded, cancelDoubt: intenttype.StateInDoubt, cancelPending: intenttype.StateCancelled} {
		if got := b.intentState(t, id); got != want {
			t.Errorf("intent %d is %s, want %s", id, got, want)
		}
	}
	var actor, reason string
	if err := b.pool.QueryRow(context.Background(), `SELECT actor, reason FROM outbox_intent_events WHERE intent_id = $1 ORDER BY at DESC, id DESC NULLS LAST LIMIT 1`, resend).Scan(&actor, &reason); err != nil {
		t.Fatal(err)
	}
	if actor != "operator:alice" || reason != "SendGrid activity shows no such email" {
		t.Errorf("retry's event: actor %q reason %q", actor, reason)
	}
	if err := b.pool.QueryRow(context.Background(), `SELECT actor FROM outbox_intent_events WHERE intent_id = $1 ORDER BY at DESC, id DESC NULLS LAST LIMIT 1`, resolve).Scan(&actor); err != nil {
		t.Fatal(err)
	}
	if actor != "operator:api" {
		t.Errorf("an action without X-Actor was recorded as %q, want operator:api", actor)
	}
	var queued bool
	if err := b.pool.QueryRow(context.Background(), `SELECT queued FROM outbox_intents WHERE id = $1`, resend).Scan(&queued); err != nil {
		t.Fatal(err)
	}
	if !queued {
		t.Errorf("retry left the intent out of the dispatchers' queue")
	}
}

func TestAPIRecordMessage(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{token: testToken})
	body := message("order-9", "billing", payment("payment", "order-9"), email("receipt", "order-9"))

	// The caller's trace context goes with the intents to their attempts.
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	r := b.do(t, req{method: "POST", path: "/api/v1/messages", body: body,
		header: map[string]string{"traceparent": "00-" + traceID + "-00f067aa0ba902b7-01"}})
	if r.status != http.StatusCreated {
		t.Fatalf("first POST: %s; want 201", r)
	}
	var traced int
	if err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox_intents WHERE split_part(trace_parent, '-', 2) = $1`, traceID).Scan(&traced); err != nil || traced != 2 {
		t.Errorf("%d intents carry the request's trace (%v), want 2", traced, err)
	}
	var created struct {
		Duplicate bool
		Intents   []struct {
			ID             int64
			IdempotencyKey string `json:"idempotency_key"`
			Kind, Name     string
		}
	}
	r.json(t, &created)
	if created.Duplicate || len(created.Intents) != 2 || created.Intents[0].IdempotencyKey != "billing:order-9:payment" || created.Intents[1].Kind != "sendgrid.email" {
		t.Errorf("201 body = %+v", created)
	}
	before := b.dbState(t)

	r = b.do(t, req{method: "POST", path: "/api/v1/messages", body: body})
	if r.status != http.StatusOK {
		t.Fatalf("duplicate POST: %s; want 200", r)
	}
	var dup struct{ Duplicate bool }
	r.json(t, &dup)
	if !dup.Duplicate {
		t.Errorf("duplicate POST answered %s, want duplicate true", r)
	}
	if after := b.dbState(t); after != before {
		t.Errorf("a duplicate changed the database:\nbefore %s\nafter  %s", before, after)
	}
}

// TestAPIRefusesBadInputAndChangesNothing sends every kind of bad request
// and checks its status, that the error names what is wrong, and that the
// database is exactly as before.
func TestAPIRefusesBadInputAndChangesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{token: testToken})
	ids := b.record(t, message("m-1", "billing", email("doubt", "r"), email("done", "r"), email("waiting", "r")))
	inDoubt, succeeded, pending := ids[0], ids[1], ids[2]
	b.setState(t, inDoubt, intenttype.StateInDoubt)
	b.setState(t, succeeded, intenttype.StateSucceeded)
	before := b.dbState(t)

	action := func(id any, name string) string { return fmt.Sprintf("/api/v1/intents/%v/%s", id, name) }
	for _, tc := range []struct {
		name   string
		rq     req
		status int
		want   string // in the error message or the field
	}{
		{"unknown filter", req{path: "/api/v1/intents?colour=red"}, 400, "colour"},
		{"unknown state", req{path: "/api/v1/intents?state=lost"}, 400, `"lost"`},
		{"unknown kind", req{path: "/api/v1/intents?kind=sendgrid.mail"}, 400, `unknown kind "sendgrid.mail"`},
		{"unknown provider", req{path: "/api/v1/intents?provider=sendgird"}, 400, `unknown provider "sendgird"`},
		{"limit over max", req{path: fmt.Sprintf("/api/v1/intents?limit=%d", audit.MaxPageSize+1)}, 400, "limit"},
		{"limit not a number", req{path: "/api/v1/intents?limit=ten"}, 400, "limit"},
		{"limit zero", req{path: "/api/v1/intents?limit=0"}, 400, "limit"},
		{"bad since", req{path: "/api/v1/intents?since=yesterday"}, 400, "since"},
		{"until before since", req{path: "/api/v1/intents?since=2024-05-02&until=2024-05-01"}, 400, "until"},
		{"bad cursor", req{path: "/api/v1/intents?cursor=%21%21"}, 400, "cursor"},
		{"consumer given twice", req{path: "/api/v1/intents?consumer=a&consumer=b"}, 400, "consumer"},
		{"id with a control character", req{path: "/api/v1/intents/a%01b"}, 400, "malformed"},
		{"id not found", req{path: "/api/v1/intents/987654"}, 404, "987654"},
		{"key not found", req{path: "/api/v1/intents/billing:nope"}, 404, "billing:nope"},
		{"action on a malformed id", req{method: "POST", path: action("abc", "retry")}, 400, "malformed"},
		{"action on id 0", req{method: "POST", path: action(0, "cancel")}, 400, "malformed"},
		{"action on a missing id", req{method: "POST", path: action(987654, "cancel")}, 404, "987654"},
		{"unknown action", req{method: "POST", path: action(inDoubt, "explode")}, 404, "explode"},
		{"retry a succeeded intent", req{method: "POST", path: action(succeeded, "retry")}, 409, "succeeded"},
		{"cancel a succeeded intent", req{method: "POST", path: action(succeeded, "cancel")}, 409, "succeeded"},
		{"resolve a pending intent", req{method: "POST", path: action(pending, "resolve"), body: `{"reason": "r", "as": "failed"}`}, 409, "pending"},
		{"cancel if_state that is stale", req{method: "POST", path: action(pending, "cancel"), body: `{"if_state": "in_doubt"}`}, 409, "changed meanwhile"},
		{"resolve without a reason", req{method: "POST", path: action(inDoubt, "resolve"), body: `{"as": "succeeded"}`}, 400, "reason"},
		{"resolve as pending", req{method: "POST", path: action(inDoubt, "resolve"), body: `{"reason": "r", "as": "pending"}`}, 400, "as"},
		{"provider_ref on a resolve as failed", req{method: "POST", path: action(inDoubt, "resolve"), body: `{"reason": "r", "as": "failed", "provider_ref": "pi_1"}`}, 400, "provider_ref"},
		{"provider_ref with a space", req{method: "POST", path: action(inDoubt, "resolve"), body: `{"reason": "r", "as": "succeeded", "provider_ref": "pi 1"}`}, 400, "provider_ref"},
		{"as on a retry", req{method: "POST", path: action(inDoubt, "retry"), body: `{"as": "failed"}`}, 400, "as"},
		{"unknown body field", req{method: "POST", path: action(inDoubt, "retry"), body: `{"reason": "r", "force": true}`}, 400, "force"},
		{"body not JSON", req{method: "POST", path: action(inDoubt, "retry"), body: `reason=r`}, 400, "request body"},
		{"body not declared JSON", req{method: "POST", path: action(inDoubt, "retry"), body: `{}`, header: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}}, 415, "Content-Type"},
		{"actor too long", req{method: "POST", path: action(inDoubt, "retry"), header: map[string]string{"X-Actor": strings.Repeat("e", audit.MaxActorLength+1)}}, 400, "X-Actor"},
		{"reason too long", req{method: "POST", path: action(inDoubt, "retry"), body: fmt.Sprintf(`{"reason": %q}`, strings.Repeat("x", audit.MaxReasonLength+1))}, 400, "reason"},
		{"message not JSON", req{method: "POST", path: "/api/v1/messages", body: `{"message_id": `}, 400, "not a message object"},
		{"message empty", req{method: "POST", path: "/api/v1/messages"}, 400, "empty"},
		{"message unknown field", req{method: "POST", path: "/api/v1/messages", body: `{"message_id": "x", "consumer": "c", "priority": 1, "intents": [` + email("", "") + `]}`}, 400, "priority"},
		{"message without intents", req{method: "POST", path: "/api/v1/messages", body: message("x", "c")}, 400, "intents"},
		{"message without id", req{method: "POST", path: "/api/v1/messages", body: `{"consumer": "c", "intents": [` + email("", "") + `]}`}, 400, "message_id"},
		{"message with a bad consumer", req{method: "POST", path: "/api/v1/messages", body: message("x", "bad consumer!", email("", ""))}, 400, "consumer"},
		{"unknown kind", req{method: "POST", path: "/api/v1/messages", body: message("x", "c", `{"kind": "fax.send", "payload": {}}`)}, 400, "intents[0].kind"},
		{"bad payload field", req{method: "POST", path: "/api/v1/messages", body: message("x", "c", `{"kind": "stripe.payment_intent", "payload": {"amount": -5, "currency": "usd"}}`)}, 400, "intents[0].payload.amount"},
		{"second intent bad, first good", req{method: "POST", path: "/api/v1/messages", body: message("x", "c", payment("p", ""), `{"kind": "sendgrid.email", "name": "e"}`)}, 400, "intents[1].payload"},
		{"two intents with one key", req{method: "POST", path: "/api/v1/messages", body: message("x", "c", payment("", ""), email("", ""))}, 400, "intents"},
		{"message too large", req{method: "POST", path: "/api/v1/messages", body: message("x", "c", fmt.Sprintf(`{"kind": "sendgrid.email", "payload": {"text": %q}}`, strings.Repeat("x", 2<<20)))}, 413, "larger than"},
		{"action body too large", req{method: "POST", path: action(inDoubt, "retry"), body: fmt.Sprintf(`{"reason": %q}`, strings.Repeat("x", 2<<20))}, 413, "larger than"},
		{"unknown endpoint", req{path: "/api/v1/nothing"}, 404, "no such API endpoint"},
	} {
		r := b.do(t, tc.rq)
		if r.status != tc.status {
			t.Errorf("%s: %s %s answered %s; want %d", tc.name, tc.rq.method, tc.rq.path, r, tc.status)
			continue
		}
		msg, field := r.errorFields(t)
		if !strings.Contains(msg, tc.want) && !strings.Contains(field, tc.want) {
			t.Errorf("%s: error %q (field %q) does not name %q", tc.name, msg, field, tc.want)
		}
		if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			t.Errorf("%s: Content-Type %q, want JSON", tc.name, ct)
		}
	}
	if after := b.dbState(t); after != before {
		t.Errorf("bad requests changed the database:\nbefore %s\nafter  %s", before, after)
	}
}

// TestAPIRefusesBadBytesAndChangesNothing sends each text the doors must
// refuse (invalid UTF-8, NUL, a lone surrogate escape) in every input the
// server takes: a message's fields, an action's body, X-Actor, every filter
// parameter, a path, and the dashboard's forms. Each is a 400 naming the
// field, never a 500 from PostgreSQL and never a silent rewrite, and the
// database is exactly as before.
func TestAPIRefusesBadBytesAndChangesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{token: testToken})
	ids := b.record(t, message("m-1", "billing", email("doubt", "r"), email("waiting", "r")))
	inDoubt := ids[0]
	b.setState(t, inDoubt, intenttype.StateInDoubt)
	before := b.dbState(t)

	action := fmt.Sprintf("/api/v1/intents/%d/retry", inDoubt)
	withText := func(text string) string {
		return `{"from": {"email": "shop@example.com"}, "to": [{"email": "a@example.com"}], "subject": "s", "text": "` + text + `"}`
	}
	type tc struct {
		name   string
		rq     req
		status int
		field  string // the field the error must name; "" to look only at the text
		want   string // in the error text
	}
	var cases []tc
	for _, bad := range testkit.BadTexts() {
		msg := func(id, consumer, ref, text string) req {
			return req{method: "POST", path: "/api/v1/messages", body: `{"message_id": "` + id + `", "consumer": "` + consumer + `", "intents": [` +
				`{"kind": "sendgrid.email", "reference": "` + ref + `", "payload": ` + withText(text) + `}]}`}
		}
		cases = append(cases,
			tc{bad.Name + " in a message id", msg(bad.JSON, "c", "r", "t"), 400, "message_id", bad.Problem},
			tc{bad.Name + " in a consumer", msg("x", bad.JSON, "r", "t"), 400, "consumer", bad.Problem},
			tc{bad.Name + " in a reference", msg("x", "c", bad.JSON, "t"), 400, "intents[0].reference", bad.Problem},
			tc{bad.Name + " in a payload", msg("x", "c", "r", bad.JSON), 400, "intents[0].payload.text", bad.Problem},
			tc{bad.Name + " in a reason", req{method: "POST", path: action, body: `{"reason": "` + bad.JSON + `"}`}, 400, "reason", bad.Problem},
			tc{bad.Name + " in if_state", req{method: "POST", path: action, body: `{"if_state": "` + bad.JSON + `"}`}, 400, "if_state", bad.Problem},
		)
		if bad.Raw == "" {
			continue
		}
		for _, p := range []string{"consumer", "message_id", "reference", "kind", "provider", "state", "cursor", "since"} {
			cases = append(cases, tc{bad.Name + " in ?" + p, req{path: "/api/v1/intents?" + p + "=" + url.QueryEscape(bad.Raw)}, 400, p, ""})
		}
		cases = append(cases,
			tc{bad.Name + " in a path", req{path: "/api/v1/intents/" + url.PathEscape(bad.Raw)}, 400, "id", "malformed"},
			tc{bad.Name + " in an action path", req{method: "POST", path: "/api/v1/intents/" + url.PathEscape(bad.Raw) + "/retry"}, 400, "id", "malformed"},
		)
		if !strings.Contains(bad.Raw, "\x00") { // net/http sends no NUL in a header
			cases = append(cases, tc{bad.Name + " in X-Actor", req{method: "POST", path: action, header: map[string]string{"X-Actor": bad.Raw}}, 400, "X-Actor", "invalid UTF-8"})
		}
	}
	for _, c := range cases {
		r := b.do(t, c.rq)
		if r.status != c.status {
			t.Errorf("%s: %s %s answered %s; want %d", c.name, c.rq.method, c.rq.path, r, c.status)
			continue
		}
		msg, field := r.errorFields(t)
		if field != c.field || !strings.Contains(msg, c.want) {
			t.Errorf("%s: error %q (field %q); want field %q and %q", c.name, msg, field, c.field, c.want)
		}
	}

	// Two message ids that differ only in their invalid bytes would both
	// decode to "order-\ufffd": both are refused, neither is a duplicate.
	for _, id := range []string{"order-\xff", "order-\xfe", `order-\ud800`, `order-\ud801`} {
		body := `{"message_id": "` + id + `", "consumer": "c", "intents": [` + email("", "") + `]}`
		if r := b.do(t, req{method: "POST", path: "/api/v1/messages", body: body}); r.status != http.StatusBadRequest {
			t.Errorf("message id %q: %s; want 400", id, r)
		}
	}

	// The dashboard: filters, a detail path and an action's form.
	formHeader := map[string]string{"Content-Type": "application/x-www-form-urlencoded"}
	for _, bad := range testkit.BadTexts() {
		if bad.Raw == "" {
			continue
		}
		for _, rq := range []req{
			{path: "/?reference=" + url.QueryEscape(bad.Raw)},
			{path: "/intents/" + url.PathEscape(bad.Raw)},
			{method: "POST", path: fmt.Sprintf("/intents/%d/retry", inDoubt), header: formHeader,
				body: url.Values{"reason": {bad.Raw}, "confirmed": {"yes"}, "seen_state": {"in_doubt"}}.Encode()},
			{method: "POST", path: fmt.Sprintf("/intents/%d/retry", inDoubt), header: formHeader,
				body: url.Values{"reason": {"r"}, "actor": {bad.Raw}, "confirmed": {"yes"}, "seen_state": {"in_doubt"}}.Encode()},
		} {
			if r := b.do(t, rq); r.status != http.StatusBadRequest {
				t.Errorf("dashboard, %s: %s %s answered %d; want 400", bad.Name, rq.method, rq.path, r.status)
			}
		}
	}

	if after := b.dbState(t); after != before {
		t.Errorf("bad bytes changed the database:\nbefore %s\nafter  %s", before, after)
	}
}
