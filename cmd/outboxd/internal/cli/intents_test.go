package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/cmd/outboxd/internal/cli"
	"github.com/outboxkit/outbox/intents/audit"
	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/internal/intentstore"
	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/internal/testkit/pgtest"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
	"github.com/outboxkit/outbox/providers/stripeprovider"
)

// operatorDB is a database with three recorded intents, as `outboxd record`
// writes them: a payment and a receipt for order-1, a receipt for order-2.
type operatorDB struct {
	pool *pgxpool.Pool
	env  map[string]string
	// ids by message id ("p1", "e1", "e2"), in recording order.
	payment, receipt, notice int64
}

func newOperatorDB(t *testing.T) *operatorDB {
	t.Helper()
	pool, dbURL := pgtest.NewDB(t)
	db := &operatorDB{pool: pool, env: map[string]string{"DATABASE_URL": dbURL, "USER": "alice"}}
	in := strings.Join([]string{
		`{"message_id": "p1", "consumer": "billing", "intents": [{"kind": "stripe.payment_intent", "reference": "order-1", "payload": ` + paymentPayload + `}]}`,
		`{"message_id": "e1", "consumer": "billing", "intents": [{"kind": "sendgrid.email", "reference": "order-1", "payload": ` + emailPayload + `}]}`,
		`{"message_id": "e2", "consumer": "mailer", "intents": [{"kind": "sendgrid.email", "reference": "order-2", "payload": ` + emailPayload + `}]}`,
	}, "\n")
	if r := outboxd(t, invocation{env: db.env, stdin: in, args: []string{"record"}}); r.code != 0 {
		t.Fatalf("record: %s", r)
	}
	for msg, target := range map[string]*int64{"p1": &db.payment, "e1": &db.receipt, "e2": &db.notice} {
		if err := pool.QueryRow(context.Background(), `SELECT id FROM outbox_intents WHERE message_id = $1`, msg).Scan(target); err != nil {
			t.Fatal(err)
		}
	}
	return db
}

// setState puts an intent in state as the dispatcher would leave it.
func (db *operatorDB) setState(t *testing.T, id int64, state intenttype.State, lastError string) {
	t.Helper()
	ctx := context.Background()
	// An in_doubt or dispatching intent's attempt may have acted.
	if _, err := db.pool.Exec(ctx, `UPDATE outbox_intents SET state = $2, attempt_count = 1, last_error = nullif($3, ''),
		queued = queued AND $2 IN ('pending', 'dispatching'), may_have_acted = $2 IN ('in_doubt', 'dispatching'),
		finished_at = CASE WHEN $2 IN ('succeeded', 'failed', 'cancelled') THEN now() END WHERE id = $1`, id, state, lastError); err != nil {
		t.Fatal(err)
	}
	// Written behind the store's back: bring its finished counts in line.
	store, err := intentstore.New(db.pool, nil)
	if err == nil {
		err = store.Recount(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
}

func (db *operatorDB) state(t *testing.T, id int64) (intenttype.State, int) {
	t.Helper()
	var state intenttype.State
	var events int
	if err := db.pool.QueryRow(context.Background(), `SELECT state, (SELECT count(*) FROM outbox_intent_events WHERE intent_id = $1) FROM outbox_intents WHERE id = $1`, id).
		Scan(&state, &events); err != nil {
		t.Fatal(err)
	}
	return state, events
}

func (db *operatorDB) run(t *testing.T, args ...string) result {
	t.Helper()
	return outboxd(t, invocation{env: db.env, args: args})
}

// tableIDs returns the ID column of `intents list`'s table.
func tableIDs(t *testing.T, out string) []string {
	t.Helper()
	var ids []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		fields := strings.Fields(l)
		if len(fields) > 0 && regexp.MustCompile(`^\d+$`).MatchString(fields[0]) {
			ids = append(ids, fields[0])
		}
	}
	return ids
}

func idList(ids ...int64) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = fmt.Sprint(id)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func TestIntentsListTableFiltersAndPages(t *testing.T) {
	t.Parallel()
	db := newOperatorDB(t)
	db.setState(t, db.receipt, intenttype.StateInDoubt, "ambiguous: the connection was lost after the request was written; the provider cannot be asked")

	r := db.run(t, "intents", "list")
	if r.code != 0 {
		t.Fatalf("intents list: %s", r)
	}
	wantContains(t, "intents list", r.stdout, "ID", "STATE", "KIND", "REFERENCE", "ATTEMPTS", "AGE", "LAST ERROR",
		"in_doubt", "sendgrid.email", "order-1", "ambiguous: the connection was lost")
	if got := fmt.Sprint(tableIDs(t, r.stdout)); got != idList(db.notice, db.receipt, db.payment) {
		t.Errorf("ids = %s, want newest first %s\n%s", got, idList(db.notice, db.receipt, db.payment), r.stdout)
	}
	if strings.Contains(r.stdout, "next page") {
		t.Errorf("a single page has a next-page hint:\n%s", r.stdout)
	}
	// The header and rows are aligned: STATE starts in the same column
	// on every line.
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	col := strings.Index(lines[0], "STATE")
	for _, l := range lines[1:] {
		if !strings.HasPrefix(l[col:], "pending") && !strings.HasPrefix(l[col:], "in_doubt") {
			t.Errorf("row not aligned with the STATE column:\n%s", r.stdout)
		}
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--state", "in_doubt"}, idList(db.receipt)},
		{[]string{"--state", "pending,in_doubt"}, idList(db.notice, db.receipt, db.payment)},
		{[]string{"--state", "pending", "--state", "in_doubt", "--kind", "sendgrid.email"}, idList(db.notice, db.receipt)},
		{[]string{"--provider", "stripe"}, idList(db.payment)},
		{[]string{"--consumer", "billing"}, idList(db.receipt, db.payment)},
		{[]string{"--message-id", "e2"}, idList(db.notice)},
		{[]string{"--reference", "order-1", "--kind", "stripe.payment_intent"}, idList(db.payment)},
		{[]string{"--since", "1h"}, idList(db.notice, db.receipt, db.payment)},
		{[]string{"--since", "2000-01-01T00:00:00Z", "--until", "2000-01-02T00:00:00Z"}, "[]"},
	} {
		r := db.run(t, append([]string{"intents", "list"}, tc.args...)...)
		if r.code != 0 {
			t.Fatalf("intents list %v: %s", tc.args, r)
		}
		if got := fmt.Sprint(tableIDs(t, r.stdout)); got != tc.want {
			t.Errorf("intents list %v = %s, want %s\n%s", tc.args, got, tc.want, r.stdout)
		}
	}
	r = db.run(t, "intents", "list", "--until", "1h")
	wantContains(t, "an empty list", r.stdout, "no intents match")

	// Pages: two, then the rest, following the hint.
	r = db.run(t, "intents", "list", "--limit", "2")
	hint := regexp.MustCompile(`(?m)^next page: outboxd intents list --limit 2 --cursor (\S+)$`).FindStringSubmatch(r.stdout)
	if r.code != 0 || hint == nil || fmt.Sprint(tableIDs(t, r.stdout)) != idList(db.notice, db.receipt) {
		t.Fatalf("intents list --limit 2: %s; want the two newest and a next-page hint", r)
	}
	r = db.run(t, "intents", "list", "--limit", "2", "--cursor", hint[1])
	if r.code != 0 || fmt.Sprint(tableIDs(t, r.stdout)) != idList(db.payment) || strings.Contains(r.stdout, "next page") {
		t.Fatalf("intents list --cursor: %s; want the oldest and no hint", r)
	}

	// The hint keeps the filters: following it lists the rest of the
	// filtered intents, not of all of them.
	r = db.run(t, "intents", "list", "--limit", "1", "--kind", "sendgrid.email", "--state", "pending,in_doubt", "--since", "1h", "--json=false")
	next := regexp.MustCompile(`(?m)^next page: outboxd (.+)$`).FindStringSubmatch(r.stdout)
	if r.code != 0 || next == nil || fmt.Sprint(tableIDs(t, r.stdout)) != idList(db.notice) {
		t.Fatalf("filtered first page: %s", r)
	}
	wantContains(t, "the next-page hint", next[1], "--kind sendgrid.email", "--state pending,in_doubt", "--limit 1", "--since 20")
	if strings.Contains(next[1], "database-url") || strings.Contains(next[1], "1h") {
		t.Errorf("the hint names the database URL or the relative --since: %s", next[1])
	}
	r = db.run(t, strings.Fields(next[1])...)
	if r.code != 0 || fmt.Sprint(tableIDs(t, r.stdout)) != idList(db.receipt) || strings.Contains(r.stdout, "next page") {
		t.Fatalf("following the filtered hint %q: %s; want only the other email, and no hint", next[1], r)
	}

	// A typo in --kind or --provider is refused, naming the known ones.
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--kind", "stripe.payment_intnet"}, []string{`--kind "stripe.payment_intnet": unknown kind (did you mean "stripe.payment_intent"?)`, "sendgrid.email", "webhook.post"}},
		{[]string{"--provider", "sendgird"}, []string{`--provider "sendgird": unknown provider (did you mean "sendgrid"?)`, "stripe, sendgrid, nats, rabbitmq, webhook"}},
		{[]string{"--kind", "fax.send"}, []string{`unknown kind; known: stripe.payment_intent`}},
	} {
		r := db.run(t, append([]string{"intents", "list"}, tc.args...)...)
		if r.code != 2 {
			t.Errorf("intents list %v: %s; want exit 2", tc.args, r)
		}
		wantContains(t, fmt.Sprintf("intents list %v stderr", tc.args), r.stderr, tc.want...)
	}

	// --json prints the Page.
	r = db.run(t, "intents", "list", "--limit", "2", "--json")
	var page audit.Page
	if err := json.Unmarshal([]byte(r.stdout), &page); err != nil || r.code != 0 {
		t.Fatalf("intents list --json: %v\n%s", err, r)
	}
	if len(page.Intents) != 2 || page.Intents[0].ID != db.notice || page.NextCursor != hint[1] || page.Intents[1].State != intenttype.StateInDoubt {
		t.Errorf("intents list --json = %+v", page)
	}
	if strings.Contains(r.stdout, "buyer@example.com") {
		t.Errorf("intents list --json shows the recipient's address:\n%s", r.stdout)
	}
}

func TestIntentsListRefusesBadFlagsBeforeConnecting(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DATABASE_URL": unreachableDB}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--state", "done"}, []string{"--state", `"done"`, "in_doubt"}},
		{[]string{"--state", "pending", "--state", "Pending"}, []string{"--state", `"Pending"`}},
		{[]string{"--limit", "0"}, []string{"--limit"}},
		{[]string{"--limit", "501"}, []string{"--limit", "500"}},
		{[]string{"--limit", "many"}, []string{"-limit"}},
		{[]string{"--cursor", "nonsense"}, []string{"--cursor"}},
		{[]string{"--since", "yesterday"}, []string{"--since", "RFC 3339"}},
		{[]string{"--until", "-5h"}, []string{"--until"}},
		{[]string{"--since", "2h", "--until", "3h"}, []string{"--until", "not after"}},
		{[]string{"--consumer", strings.Repeat("c", 300)}, []string{"--consumer"}},
		{[]string{"--message-id", "a\tb"}, []string{"--message-id"}},
		{[]string{"extra"}, []string{`unexpected argument "extra"`}},
	} {
		r := outboxd(t, invocation{env: env, args: append([]string{"intents", "list"}, tc.args...)})
		if r.code != 2 {
			t.Errorf("intents list %v: %s; want exit 2", tc.args, r)
			continue
		}
		wantContains(t, fmt.Sprintf("intents list %v stderr", tc.args), r.stderr, tc.want...)
	}
	// Good flags get as far as the database.
	if r := outboxd(t, invocation{env: env, args: []string{"intents", "list", "--state", "in_doubt", "--since", "7d"}}); r.code != 1 {
		t.Errorf("intents list against an unreachable database: %s; want exit 1", r)
	}
}

func TestIntentsShowPayloadAttemptsAndEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newOperatorDB(t)
	if _, err := db.pool.Exec(ctx, `INSERT INTO outbox_attempts (intent_id, attempt, started_at, finished_at, outcome, http_status, provider_ref, replayed, error)
		VALUES ($1, 1, now() - interval '1 minute', now(), 'ambiguous', 502, 'msg_abc', true, 'bad gateway')`, db.receipt); err != nil {
		t.Fatal(err)
	}
	db.setState(t, db.receipt, intenttype.StateInDoubt, "ambiguous: bad gateway")

	for _, args := range [][]string{
		{"intents", "show", fmt.Sprint(db.receipt)},
		{"intents", "show", "billing:e1"},
		{"intents", "show", "--database-url", db.env["DATABASE_URL"], "billing:e1"},
	} {
		r := db.run(t, args...)
		if r.code != 0 {
			t.Fatalf("%v: %s", args, r)
		}
		wantContains(t, fmt.Sprint(args), r.stdout,
			fmt.Sprintf("intent              %d", db.receipt), "in_doubt", "sendgrid.email (provider sendgrid)", "billing:e1", "order-1",
			"payload (redacted;", `"subject": "Receipt"`,
			"attempts (1):", "OUTCOME", "ambiguous", "502", "yes", "msg_abc", "bad gateway",
			"events (1):", "consumer:billing", "pending", "recorded")
		if strings.Contains(r.stdout, "buyer@example.com") {
			t.Errorf("%v shows the recipient's address:\n%s", args, r.stdout)
		}
	}

	// Flags after the id, and --json: the Detail.
	r := db.run(t, "intents", "show", fmt.Sprint(db.receipt), "--json")
	var d audit.Detail
	if err := json.Unmarshal([]byte(r.stdout), &d); err != nil || r.code != 0 {
		t.Fatalf("intents show --json: %v\n%s", err, r)
	}
	if d.Intent.ID != db.receipt || len(d.Attempts) != 1 || d.Attempts[0].HTTPStatus != 502 || len(d.Events) != 1 {
		t.Errorf("intents show --json = %+v", d)
	}
	if strings.Contains(r.stdout, "buyer@example.com") {
		t.Errorf("intents show --json shows the recipient's address:\n%s", r.stdout)
	}

	r = db.run(t, "intents", "show", "999999")
	if r.code != 1 {
		t.Errorf("show of a missing intent: %s; want exit 1", r)
	}
	wantContains(t, "stderr", r.stderr, "not found", "999999")
	for _, args := range [][]string{{"intents", "show"}, {"intents", "show", "1", "2"}, {"intents", "show", "--jsn", "1"}} {
		if r := db.run(t, args...); r.code != 2 {
			t.Errorf("%v: %s; want exit 2", args, r)
		}
	}
}

func TestIntentsRetryCancelResolve(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newOperatorDB(t)
	db.setState(t, db.receipt, intenttype.StateInDoubt, "ambiguous")
	db.setState(t, db.payment, intenttype.StateInDoubt, "ambiguous")

	// retry: in_doubt -> pending, queued for the dispatchers, recorded with
	// the actor from $USER.
	r := db.run(t, "intents", "retry", fmt.Sprint(db.receipt), "--reason", "not in SendGrid's activity feed")
	if r.code != 0 {
		t.Fatalf("retry: %s", r)
	}
	wantContains(t, "retry stdout", r.stdout, fmt.Sprintf("intent %d is now pending (retry by operator:alice", db.receipt), "queued for the dispatchers")
	if strings.Contains(r.stdout, "resend") {
		t.Errorf("retry's output says resend:\n%s", r.stdout)
	}
	var actor, reason string
	var queued bool
	if err := db.pool.QueryRow(ctx, `SELECT actor, reason, (SELECT queued FROM outbox_intents WHERE id = $1)
		FROM outbox_intent_events WHERE intent_id = $1 ORDER BY at DESC, id DESC NULLS LAST LIMIT 1`, db.receipt).Scan(&actor, &reason, &queued); err != nil {
		t.Fatal(err)
	}
	if actor != "operator:alice" || reason != "not in SendGrid's activity feed" || !queued {
		t.Errorf("retry recorded actor %q reason %q, queued %v", actor, reason, queued)
	}

	// Illegal: retry it again (it is pending now). Exit 1, nothing changed.
	before, beforeEvents := db.state(t, db.receipt)
	r = db.run(t, "intents", "resend", fmt.Sprint(db.receipt), "--reason", "again") // resend: retry's alias
	if r.code != 1 {
		t.Fatalf("retry of a pending intent: %s; want exit 1", r)
	}
	wantContains(t, "stderr", r.stderr, fmt.Sprintf("cannot retry intent %d: it is pending", db.receipt), "only from in_doubt", "nothing was changed")
	if after, afterEvents := db.state(t, db.receipt); after != before || afterEvents != beforeEvents {
		t.Errorf("a refused retry changed the intent: %s/%d -> %s/%d", before, beforeEvents, after, afterEvents)
	}

	// resolve the payment by its key, with --actor and --json.
	r = db.run(t, "intents", "resolve", "billing:p1", "--as", "succeeded", "--provider-ref", "pi_123", "--reason", "seen in the dashboard", "--actor", "bob", "--json")
	var in intenttype.Intent
	if err := json.Unmarshal([]byte(r.stdout), &in); err != nil || r.code != 0 {
		t.Fatalf("resolve --json: %v\n%s", err, r)
	}
	if in.ID != db.payment || in.State != intenttype.StateSucceeded || in.FinishedAt == nil || in.ProviderRef != "pi_123" {
		t.Errorf("resolve --json = %+v", in)
	}
	if strings.Contains(r.stdout, "pm_card_visa") {
		t.Errorf("resolve --json shows the payment method:\n%s", r.stdout)
	}
	// Resolving a succeeded intent, or a pending one, is refused.
	r = db.run(t, "intents", "resolve", fmt.Sprint(db.payment), "--as", "failed", "--reason", "x")
	if r.code != 1 {
		t.Errorf("resolve of a succeeded intent: %s; want exit 1", r)
	}
	wantContains(t, "stderr", r.stderr, "it is succeeded", "nothing was changed")
	if r = db.run(t, "intents", "resolve", fmt.Sprint(db.notice), "--as", "failed", "--reason", "x"); r.code != 1 {
		t.Errorf("resolve of a pending intent: %s; want exit 1", r)
	}

	// cancel the pending notice; then cancelling it again is refused.
	r = db.run(t, "intents", "cancel", fmt.Sprint(db.notice), "--reason", "order withdrawn")
	if r.code != 0 {
		t.Fatalf("cancel: %s", r)
	}
	wantContains(t, "cancel stdout", r.stdout, "is now cancelled")
	if r = db.run(t, "intents", "cancel", fmt.Sprint(db.notice), "--reason", "again"); r.code != 1 {
		t.Errorf("cancel of a cancelled intent: %s; want exit 1", r)
	}
	wantContains(t, "stderr", r.stderr, "it is cancelled", "allowed only from pending")

	// --expect-state: the receipt is pending, not in_doubt as seen.
	r = db.run(t, "intents", "cancel", fmt.Sprint(db.receipt), "--reason", "x", "--expect-state", "in_doubt")
	if r.code != 1 {
		t.Errorf("cancel with a stale --expect-state: %s; want exit 1", r)
	}
	wantContains(t, "stderr", r.stderr, "not in_doubt as expected", "nothing was changed")
	if state, _ := db.state(t, db.receipt); state != intenttype.StatePending {
		t.Errorf("receipt is %s after a refused cancel, want pending", state)
	}

	if r = db.run(t, "intents", "cancel", "999999", "--reason", "x"); r.code != 1 {
		t.Errorf("cancel of a missing intent: %s; want exit 1", r)
	}
}

func TestIntentsActionsRefuseBadFlagsBeforeConnecting(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DATABASE_URL": unreachableDB}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"retry", "5"}, []string{"--reason is required"}},
		{[]string{"retry", "5", "--reason", "  "}, []string{"--reason is required"}},
		{[]string{"cancel", "5", "--reason", strings.Repeat("r", 1001)}, []string{"--reason", "1000"}},
		{[]string{"cancel", "5", "--reason", "a\nb"}, []string{"--reason", "control characters"}},
		{[]string{"cancel", "5", "--reason", "x", "--actor", ""}, []string{"--actor"}},
		{[]string{"cancel", "5", "--reason", "x", "--expect-state", "gone"}, []string{"--expect-state"}},
		{[]string{"cancel", "--reason", "x"}, []string{"ID|KEY"}},
		{[]string{"cancel", "5", "6", "--reason", "x"}, []string{`unexpected argument "6"`}},
		{[]string{"resolve", "5", "--reason", "x"}, []string{"--as is required"}},
		{[]string{"resolve", "5", "--reason", "x", "--as", "pending"}, []string{"--as", "succeeded or failed"}},
		{[]string{"resolve", "5", "--as", "failed"}, []string{"--reason is required"}},
	} {
		r := outboxd(t, invocation{env: env, args: append([]string{"intents"}, tc.args...)})
		if r.code != 2 {
			t.Errorf("intents %v: %s; want exit 2", tc.args, r)
			continue
		}
		wantContains(t, fmt.Sprintf("intents %v stderr", tc.args), r.stderr, tc.want...)
	}
	if r := outboxd(t, invocation{env: env, args: []string{"intents", "retry", "5", "--reason", "ok"}}); r.code != 1 {
		t.Errorf("a good retry against an unreachable database: %s; want exit 1", r)
	}
}

func TestIntentsAndStatsHelp(t *testing.T) {
	t.Parallel()
	r := outboxd(t, invocation{args: []string{"--help"}})
	wantContains(t, "outboxd --help", r.stdout, "intents", "stats")

	r = outboxd(t, invocation{args: []string{"intents", "--help"}})
	if r.code != 0 {
		t.Errorf("intents --help: %s", r)
	}
	wantContains(t, "intents --help", r.stdout, "list", "show", "retry", "cancel", "resolve", "operator:<actor>")
	r = outboxd(t, invocation{args: []string{"intents"}})
	if r.code != 2 {
		t.Errorf("intents without a subcommand: %s; want exit 2", r)
	}
	wantContains(t, "stderr", r.stderr, "Subcommands:", "name a subcommand")
	r = outboxd(t, invocation{args: []string{"intents", "frobnicate"}})
	if r.code != 2 {
		t.Errorf("intents frobnicate: %s; want exit 2", r)
	}
	wantContains(t, "stderr", r.stderr, `unknown subcommand "frobnicate"`)

	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"intents", "list"}, []string{"newest first", "--state", "--cursor", "--json", "--since"}},
		{[]string{"intents", "show"}, []string{"redacted", "attempt", "--json", "--reveal", "how to look the intent up"}},
		{[]string{"intents", "retry"}, []string{"in_doubt", "--reason", "--actor", "new provider key", "--dry-run", "--yes"}},
		{[]string{"intents", "cancel"}, []string{"pending", "may have reached the provider", "--reason", "--dry-run"}},
		{[]string{"intents", "resolve"}, []string{"--as", "succeeded", "failed"}},
		{[]string{"stats"}, []string{"by state", "in_doubt", "--json"}},
	} {
		r := outboxd(t, invocation{args: append(tc.args, "--help")})
		if r.code != 0 {
			t.Errorf("%v --help: %s; want exit 0", tc.args, r)
		}
		wantContains(t, fmt.Sprintf("%v --help", tc.args), r.stdout, tc.want...)
	}
}

// TestIntentsRefuseBadBytesInFlagsAndArguments gives each text the doors
// must refuse (invalid UTF-8, NUL) to every operator input of `intents`:
// list's filters, show's and the actions' ID|KEY, --actor, $USER and
// --reason. Each is a usage error (exit 2) naming the flag or argument,
// never a database error, and the database is unchanged.
func TestIntentsRefuseBadBytesInFlagsAndArguments(t *testing.T) {
	t.Parallel()
	db := newOperatorDB(t)
	db.setState(t, db.receipt, intenttype.StateInDoubt, "ambiguous")
	snapshot := func() string {
		var s string
		if err := db.pool.QueryRow(context.Background(), `SELECT (SELECT json_agg(i ORDER BY id)::text FROM outbox_intents i) ||
			(SELECT count(*) FROM outbox_intent_events) || '/' || (SELECT count(*) FROM river_job WHERE state <> 'completed')`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := snapshot()
	receipt := fmt.Sprint(db.receipt)
	for _, bad := range testkit.BadTexts() {
		if bad.Raw == "" {
			continue
		}
		for _, tc := range []struct {
			env  map[string]string
			args []string
			want string
		}{
			{nil, []string{"list", "--reference", bad.Raw}, "--reference"},
			{nil, []string{"list", "--message-id", bad.Raw}, "--message-id"},
			{nil, []string{"list", "--consumer", bad.Raw}, "--consumer"},
			{nil, []string{"list", "--kind", bad.Raw}, "--kind"},
			{nil, []string{"list", "--provider", bad.Raw}, "--provider"},
			{nil, []string{"show", bad.Raw}, "ID|KEY"},
			{nil, []string{"show", "billing:" + bad.Raw}, "ID|KEY"},
			{nil, []string{"cancel", bad.Raw, "--reason", "r"}, "ID|KEY"},
			{nil, []string{"retry", receipt, "--reason", bad.Raw}, "--reason"},
			{nil, []string{"resolve", receipt, "--as", "failed", "--reason", bad.Raw}, "--reason"},
			{nil, []string{"cancel", receipt, "--reason", "r", "--actor", bad.Raw}, "--actor"},
			{vars(db.env, "USER", bad.Raw), []string{"cancel", receipt, "--reason", "r"}, "--actor"},
		} {
			env := db.env
			if tc.env != nil {
				env = tc.env
			}
			r := outboxd(t, invocation{env: env, args: append([]string{"intents"}, tc.args...)})
			if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
				t.Errorf("%s: intents %q: %s; want exit 2 naming %s", bad.Name, tc.args, r, tc.want)
			}
		}
	}
	if after := snapshot(); after != before {
		t.Errorf("refused commands changed the database:\nbefore %s\nafter  %s", before, after)
	}
}

// An action from a stale view is refused at the CLI too: --if-version is
// what `intents show` printed.
func TestActionsTakeTheVersionShown(t *testing.T) {
	t.Parallel()
	db := newOperatorDB(t)
	db.setState(t, db.receipt, intenttype.StateInDoubt, "provider said 500")
	id := fmt.Sprint(db.receipt)
	r := db.run(t, "intents", "show", id)
	wantContains(t, "intents show", r.stdout, "version", "--if-version g0.a1")

	r = db.run(t, "intents", "retry", id, "--reason", "x", "--if-version", "g3.a9")
	if r.code != 1 {
		t.Fatalf("retry at a version not seen: %s; want exit 1", r)
	}
	wantContains(t, "stderr", r.stderr, "changed since it was seen", "g3.a9", "nothing was changed")
	if state, _ := db.state(t, db.receipt); state != intenttype.StateInDoubt {
		t.Fatalf("receipt is %s after a refused retry, want in_doubt", state)
	}
	if r = db.run(t, "intents", "retry", id, "--reason", "x", "--if-version", "3.9"); r.code != 2 || !strings.Contains(r.stderr, "--if-version") {
		t.Fatalf("retry with a malformed --if-version: %s; want a usage error naming it", r)
	}
	r = db.run(t, "intents", "retry", id, "--reason", "checked", "--if-version", "g0.a1", "--action-id", "ticket-42")
	if r.code != 0 {
		t.Fatalf("retry at the version shown: %s", r)
	}
	// The same action again: found applied, not refused as pending.
	if r = db.run(t, "intents", "retry", id, "--reason", "checked", "--action-id", "ticket-42"); r.code != 0 {
		t.Fatalf("the same retry again: %s; want it found applied", r)
	}
}

// /dev/null is a character device, not a terminal: a bulk action without
// --yes is refused, not asked and answered "nothing was changed" (a silent
// no-op under cron).
func TestBulkConfirmationNeedsARealTerminal(t *testing.T) {
	t.Parallel()
	db := newOperatorDB(t)
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	env, stdout, stderr := environment(db.env, "")
	env.Stdin = devnull
	code := cli.Main(context.Background(), []string{"intents", "cancel", "--state", "pending", "--reason", "x"}, env)
	if code != 2 || !strings.Contains(stderr.String(), "needs --yes when stdin is not a terminal") || strings.Contains(stdout.String(), "type yes") {
		t.Fatalf("bulk cancel with stdin /dev/null: exit %d\nstdout %s\nstderr %s\nwant exit 2 asking for --yes", code, stdout, stderr)
	}
}

// Every kind a built-in adapter performs is known to the filters, whether
// or not the database holds one yet (stripe.refund was refused before).
func TestEveryBuiltInKindFilters(t *testing.T) {
	t.Parallel()
	db := newOperatorDB(t)
	sp, err := stripeprovider.New(stripeprovider.Config{})
	if err != nil {
		t.Fatal(err)
	}
	gp, err := sendgridprovider.New(sendgridprovider.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range append(sp.Kinds(), gp.Kinds()...) {
		if r := db.run(t, "intents", "list", "--kind", kind); r.code != 0 {
			t.Errorf("intents list --kind %s: %s", kind, r)
		}
	}
}

// intents show gives an in_doubt intent's advice (what may have acted
// means, how to check, when it is looked up again or that it waits for an
// operator), and a succeeded intent none of it, even one an attempt may
// have acted for (issue 20: it read "resolve --as succeeded").
func TestIntentsShowAdvisesOnlyWhatApplies(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newOperatorDB(t)
	db.setState(t, db.receipt, intenttype.StateInDoubt, "ambiguous: bad gateway")
	db.setState(t, db.payment, intenttype.StateSucceeded, "")
	if _, err := db.pool.Exec(ctx, `UPDATE outbox_intents SET may_have_acted = true WHERE id IN ($1, $2)`, db.receipt, db.payment); err != nil {
		t.Fatal(err)
	}
	r := db.run(t, "intents", "show", fmt.Sprint(db.receipt))
	wantContains(t, "show in_doubt", r.stdout, "may have acted      yes: an attempt may have reached the provider, so check there before you resolve or resend it",
		"next look-up        none scheduled: it waits for an operator", "Delivered or processed: resolve --as succeeded", "None found proves nothing")
	if strings.Contains(r.stdout, "none: retry") {
		t.Errorf("show in_doubt advises a resend on nothing found:\n%s", r.stdout)
	}
	if _, err := db.pool.Exec(ctx, `UPDATE outbox_intents SET recheck_at = now() + interval '10 minutes' WHERE id = $1`, db.receipt); err != nil {
		t.Fatal(err)
	}
	r = db.run(t, "intents", "show", fmt.Sprint(db.receipt))
	if !regexp.MustCompile(`next look-up +\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ \(in (9|10)m\), by the dispatcher`).MatchString(r.stdout) {
		t.Errorf("show in_doubt with a re-check scheduled does not say when:\n%s", r.stdout)
	}

	r = db.run(t, "intents", "show", fmt.Sprint(db.payment))
	if r.code != 0 {
		t.Fatalf("show succeeded: %s", r)
	}
	for _, advice := range []string{"may have acted", "resolve", "retry", "next look-up", "cancel"} {
		if strings.Contains(r.stdout, advice) {
			t.Errorf("show of a succeeded intent says %q:\n%s", advice, r.stdout)
		}
	}
}
