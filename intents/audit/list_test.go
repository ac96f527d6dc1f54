package audit_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/intents/audit"
	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/internal/testkit/fixture"
	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
	"github.com/outboxkit/outbox/providers/stripeprovider"
)

func TestListFilters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	old := b.record(t, "billing", "m1", "order-1", stripeprovider.KindPaymentIntent, paymentPayload)
	receipt := b.record(t, "billing", "m2", "order-1", sendgridprovider.KindEmail, emailPayload)
	notice := b.record(t, "mailer", "m3", "order-2", sendgridprovider.KindEmail, emailPayload)
	b.setState(t, old, intenttype.StateSucceeded)
	b.setState(t, receipt, intenttype.StateInDoubt)
	if _, err := b.pool.Exec(ctx, `UPDATE outbox_intents SET created_at = now() - interval '48 hours' WHERE id = $1`, old); err != nil {
		t.Fatal(err)
	}
	dayAgo := time.Now().Add(-24 * time.Hour)

	for _, tc := range []struct {
		name   string
		filter audit.Filter
		want   []int64
	}{
		{"none", audit.Filter{}, []int64{notice, receipt, old}},
		{"one state", audit.Filter{States: []intenttype.State{intenttype.StateInDoubt}}, []int64{receipt}},
		{"two states", audit.Filter{States: []intenttype.State{intenttype.StatePending, intenttype.StateInDoubt}}, []int64{notice, receipt}},
		{"state with none", audit.Filter{States: []intenttype.State{intenttype.StateCancelled}}, []int64{}},
		{"kind", audit.Filter{Kinds: []string{sendgridprovider.KindEmail}}, []int64{notice, receipt}},
		{"two kinds", audit.Filter{Kinds: []string{sendgridprovider.KindEmail, stripeprovider.KindPaymentIntent}}, []int64{notice, receipt, old}},
		{"provider", audit.Filter{Providers: []string{stripeprovider.Name}}, []int64{old}},
		{"consumer", audit.Filter{Consumer: "billing"}, []int64{receipt, old}},
		{"message id", audit.Filter{MessageID: "m3"}, []int64{notice}},
		{"reference", audit.Filter{Reference: "order-1"}, []int64{receipt, old}},
		{"since", audit.Filter{CreatedSince: dayAgo}, []int64{notice, receipt}},
		{"until", audit.Filter{CreatedUntil: dayAgo}, []int64{old}},
		{"since and until", audit.Filter{CreatedSince: dayAgo.Add(-48 * time.Hour), CreatedUntil: dayAgo}, []int64{old}},
		{"all together", audit.Filter{Consumer: "billing", Reference: "order-1", States: []intenttype.State{intenttype.StateInDoubt}, Kinds: []string{sendgridprovider.KindEmail}, Providers: []string{sendgridprovider.Name}, CreatedSince: dayAgo}, []int64{receipt}},
		{"conflicting", audit.Filter{Consumer: "mailer", Reference: "order-1"}, []int64{}},
	} {
		page, err := b.store.List(ctx, tc.filter)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := ids(page.Intents); !slices.Equal(got, tc.want) {
			t.Errorf("%s: List = %v, want %v", tc.name, got, tc.want)
		}
		if page.NextCursor != "" {
			t.Errorf("%s: a single page has NextCursor %q", tc.name, page.NextCursor)
		}
	}

	// The rows carry what an operator needs.
	page, err := b.store.List(ctx, audit.Filter{MessageID: "m2"})
	if err != nil {
		t.Fatal(err)
	}
	got := page.Intents[0]
	if got.Consumer != "billing" || got.Reference != "order-1" || got.Kind != sendgridprovider.KindEmail || got.Provider != sendgridprovider.Name ||
		got.State != intenttype.StateInDoubt || got.IdempotencyKey != "billing:m2" || got.CreatedAt.IsZero() {
		t.Errorf("listed intent = %+v", got)
	}
}

func TestListPaginatesWithoutDuplicatesOrGaps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	all := b.recordN(t, "billing", 23)
	for _, id := range all[:10] {
		b.setState(t, id, intenttype.StateInDoubt)
	}
	slices.Reverse(all) // newest first, as List returns them

	walk := func(f audit.Filter, during func(page int)) ([]int64, int) {
		t.Helper()
		var seen []int64
		pages := 0
		for {
			page, err := b.store.List(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			pages++
			if len(page.Intents) > f.Limit {
				t.Fatalf("page %d has %d intents, limit %d", pages, len(page.Intents), f.Limit)
			}
			seen = append(seen, ids(page.Intents)...)
			if during != nil {
				during(pages)
			}
			if page.NextCursor == "" {
				return seen, pages
			}
			if pages > 50 {
				t.Fatal("pagination does not end")
			}
			f.Cursor = page.NextCursor
		}
	}

	// Intents recorded between pages are newer than the cursor: they do not
	// shift later pages.
	seen, pages := walk(audit.Filter{Limit: 5}, func(page int) {
		if page <= 2 {
			b.record(t, "late", fmt.Sprintf("late-%d", page), "", stripeprovider.KindPaymentIntent, paymentPayload)
		}
	})
	if !slices.Equal(seen, all) || pages != 5 {
		t.Fatalf("walked %d pages: %v, want every intent once, newest first: %v", pages, seen, all)
	}

	// A page size dividing the count exactly: the last full page says so.
	if _, pages := walk(audit.Filter{Consumer: "billing", Limit: 23}, nil); pages != 1 {
		t.Errorf("23 intents at 23 per page took %d pages, want 1", pages)
	}

	// With a filter: only in_doubt, 3 per page.
	wantInDoubt := all[len(all)-10:]
	seen, pages = walk(audit.Filter{States: []intenttype.State{intenttype.StateInDoubt}, Limit: 3}, nil)
	if !slices.Equal(seen, wantInDoubt) || pages != 4 {
		t.Fatalf("in_doubt pages (%d) = %v, want %v", pages, seen, wantInDoubt)
	}

	// The default page size.
	b.recordN(t, "bulk", audit.DefaultPageSize+1)
	page, err := b.store.List(ctx, audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Intents) != audit.DefaultPageSize || page.NextCursor == "" {
		t.Errorf("default page: %d intents, cursor %q; want %d and a cursor", len(page.Intents), page.NextCursor, audit.DefaultPageSize)
	}
}

func TestListRejectsBadFilters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	now := time.Now()
	for _, tc := range []struct {
		filter audit.Filter
		field  string
	}{
		{audit.Filter{States: []intenttype.State{"done"}}, "States"},
		{audit.Filter{States: []intenttype.State{""}}, "States"},
		{audit.Filter{Kinds: []string{""}}, "Kinds"},
		{audit.Filter{Providers: []string{strings.Repeat("p", 300)}}, "Providers"},
		{audit.Filter{Consumer: "bad\nconsumer"}, "Consumer"},
		{audit.Filter{MessageID: strings.Repeat("m", 256)}, "MessageID"},
		{audit.Filter{Reference: "\x00"}, "Reference"},
		{audit.Filter{CreatedSince: now, CreatedUntil: now.Add(-time.Hour)}, "CreatedUntil"},
		{audit.Filter{CreatedSince: now, CreatedUntil: now}, "CreatedUntil"},
		{audit.Filter{Limit: -1}, "Limit"},
		{audit.Filter{Limit: audit.MaxPageSize + 1}, "Limit"},
		{audit.Filter{Cursor: "not a cursor"}, "Cursor"},
		{audit.Filter{Cursor: "djE6LTE"}, "Cursor"}, // "v1:-1"
	} {
		_, err := b.store.List(ctx, tc.filter)
		var fe *audit.FieldError
		if !errors.Is(err, audit.ErrInvalidFilter) || !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("List(%+v) = %v, want an ErrInvalidFilter naming %s", tc.filter, err, tc.field)
			continue
		}
		if !strings.Contains(err.Error(), tc.field) {
			t.Errorf("error %q does not name %s", err, tc.field)
		}
		if verr := tc.filter.Validate(); verr == nil || verr.Error() != err.Error() {
			t.Errorf("Validate(%+v) = %v, List said %v", tc.filter, verr, err)
		}
	}
	if _, err := b.store.List(ctx, audit.Filter{Limit: audit.MaxPageSize}); err != nil {
		t.Errorf("List with Limit = MaxPageSize: %v", err)
	}
}

func TestGetByIDOrKeyWithHistoryOldestFirst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	id := b.record(t, "billing", "order-7", "order-7", stripeprovider.KindPaymentIntent, paymentPayload)
	other := b.record(t, "billing", "order-8", "", stripeprovider.KindPaymentIntent, paymentPayload)
	// Two attempts, inserted newest first, and an ambiguous outcome.
	for _, sql := range []string{
		`INSERT INTO outbox_attempts (intent_id, attempt, started_at, finished_at, outcome, http_status, provider_ref, replayed, error) VALUES
			($1, 2, now() - interval '1 minute', now(), 'ambiguous', 500, NULL, true, 'server error'),
			($1, 1, now() - interval '2 minutes', now() - interval '119 seconds', 'retry', 503, NULL, false, 'unavailable')`,
		`UPDATE outbox_intents SET state = 'in_doubt', queued = false, attempt_count = 2, last_error = 'ambiguous' WHERE id = $1`,
		`INSERT INTO outbox_events (intent_id, actor, from_state, to_state, reason) VALUES ($1, 'dispatcher', 'pending', 'in_doubt', 'ambiguous')`,
	} {
		if _, err := b.pool.Exec(ctx, sql, id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.store.Resend(ctx, id, "alice", "checked the dashboard"); err != nil {
		t.Fatal(err)
	}

	for _, key := range []string{fmt.Sprint(id), "billing:order-7"} {
		d, err := b.store.Get(ctx, key)
		if err != nil {
			t.Fatalf("Get(%q): %v", key, err)
		}
		if d.Intent.ID != id || d.Intent.State != intenttype.StatePending || d.Intent.AttemptCount != 2 || d.Intent.Reference != "order-7" {
			t.Errorf("Get(%q).Intent = %+v", key, d.Intent)
		}
		if len(d.Attempts) != 2 || d.Attempts[0].Attempt != 1 || d.Attempts[0].HTTPStatus != 503 || d.Attempts[0].Outcome != "retry" ||
			d.Attempts[1].Attempt != 2 || !d.Attempts[1].Replayed || d.Attempts[1].Error != "server error" || d.Attempts[1].FinishedAt == nil {
			t.Errorf("Get(%q).Attempts = %+v, want attempts 1 then 2 with their outcomes", key, d.Attempts)
		}
		var trail []string
		for _, e := range d.Events {
			trail = append(trail, fmt.Sprintf("%s:%s>%s:%s", e.Actor, e.FromState, e.ToState, e.Reason))
		}
		want := []string{"consumer:billing:>pending:recorded", "dispatcher:pending>in_doubt:ambiguous", "operator:alice:in_doubt>pending:checked the dashboard"}
		if !slices.Equal(trail, want) {
			t.Errorf("Get(%q).Events = %v, want %v", key, trail, want)
		}
	}

	// A key that looks like a number but is no intent's id is tried as a
	// key.
	var numericKey int64
	err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		rec, err := b.recorder.RecordTx(ctx, tx, intents.Intent{Kind: stripeprovider.KindPaymentIntent, Key: "424242", Payload: json.RawMessage(paymentPayload)})
		if err == nil {
			numericKey = rec[0].ID
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if d, err := b.store.Get(ctx, "424242"); err != nil || d.Intent.ID != numericKey {
		t.Errorf("Get(\"424242\") = %+v, %v; want intent %d by its key", d.Intent, err, numericKey)
	}
	if d, err := b.store.Get(ctx, fmt.Sprint(other)); err != nil || d.Intent.ID != other || len(d.Attempts) != 0 || d.Attempts == nil {
		t.Errorf("Get(%d) = %+v, %v; want the intent with no attempts (an empty list)", other, d, err)
	}

	for _, missing := range []string{"999999", "no-such-key", "-1"} {
		if _, err := b.store.Get(ctx, missing); !errors.Is(err, audit.ErrNotFound) {
			t.Errorf("Get(%q) = %v, want ErrNotFound", missing, err)
		}
	}
	if _, err := b.store.Get(ctx, ""); !errors.Is(err, audit.ErrInvalidInput) {
		t.Errorf("Get(\"\") = %v, want ErrInvalidInput", err)
	}
}

func TestPayloadsAreRedacted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	payment := b.record(t, "billing", "p", "", stripeprovider.KindPaymentIntent, paymentPayload)
	email := b.record(t, "billing", "e", "", sendgridprovider.KindEmail, emailPayload)

	leaks := func(what string, v any) {
		t.Helper()
		out, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		for _, secret := range []string{receiptEmail, recipientEmail, "pm_card_visa"} {
			if strings.Contains(string(out), secret) {
				t.Errorf("%s shows %q:\n%s", what, secret, out)
			}
		}
	}
	page, err := b.store.List(ctx, audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	leaks("List", page)
	for _, id := range []int64{payment, email} {
		d, err := b.store.Get(ctx, fmt.Sprint(id))
		if err != nil {
			t.Fatal(err)
		}
		leaks("Get", d)
		if !json.Valid(d.Intent.Payload) || string(d.Intent.Payload) == "" {
			t.Errorf("Get(%d) payload = %s", id, d.Intent.Payload)
		}
	}
	d, err := b.store.Get(ctx, fmt.Sprint(payment))
	if err != nil {
		t.Fatal(err)
	}
	var shown map[string]any
	if err := json.Unmarshal(d.Intent.Payload, &shown); err != nil {
		t.Fatal(err)
	}
	if shown["amount"] != float64(500) || shown["receipt_email"] != "r***@example.com" {
		t.Errorf("redacted payment = %v, want the amount kept and the email masked", shown)
	}
	b.setState(t, email, intenttype.StateInDoubt)
	acted, err := b.store.Resolve(ctx, email, intenttype.StateFailed, "alice", "bounced")
	if err != nil {
		t.Fatal(err)
	}
	leaks("Cancel's intent", acted)

	// Without the provider's rule, nothing of the payload is shown.
	sp, err := stripeprovider.New(stripeprovider.Config{})
	if err != nil {
		t.Fatal(err)
	}
	stripeOnly, err := providers.NewRegistry(sp)
	if err != nil {
		t.Fatal(err)
	}
	for name, store := range map[string]*audit.Store{"stripe only": fixture.Audit(t, b.pool, stripeOnly), "nil registry": fixture.Audit(t, b.pool, nil)} {
		d, err := store.Get(ctx, fmt.Sprint(email))
		if err != nil {
			t.Fatal(err)
		}
		if string(d.Intent.Payload) != `{"redacted":"provider not configured"}` {
			t.Errorf("%s: email payload = %s", name, d.Intent.Payload)
		}
		page, err := store.List(ctx, audit.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		leaks(name+" List", page)
	}
}
