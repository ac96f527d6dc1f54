package dispatcher_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/dispatcher"
	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/stripeprovider"
)

// oldIntent is an intent row to insert with timestamps in the past.
type oldIntent struct {
	state           string
	createdAgo      time.Duration
	finishedAgo     time.Duration // 0: not finished
	attemptAndEvent bool          // give it one attempt and one event
}

// oldRows inserts processed markers (by message id, of consumer
// "retention") and intents (by label, keyed "retention:<label>") with
// timestamps in the past of the database's clock, and returns the intents'
// ids by label.
func (b *testBundle) oldRows(t *testing.T, markers map[string]time.Duration, intents map[string]oldIntent) map[string]int64 {
	t.Helper()
	ctx := context.Background()
	for id, ago := range markers {
		if _, err := b.pool.Exec(ctx, `INSERT INTO outbox_processed_messages (consumer, message_id, processed_at) VALUES ('retention', $1, now() - $2::bigint * interval '1 microsecond')`, id, ago.Microseconds()); err != nil {
			t.Fatal(err)
		}
	}
	ids := map[string]int64{}
	for label, in := range intents {
		var finished *int64
		if in.finishedAgo > 0 {
			us := in.finishedAgo.Microseconds()
			finished = &us
		}
		var id int64
		err := b.pool.QueryRow(ctx, `
INSERT INTO outbox_intents (idempotency_key, kind, provider, payload, state, created_at, updated_at, finished_at,
    attempt_count, claimed_attempt)
VALUES ($1, 'stripe.payment_intent', 'stripe', '{}', $2,
        now() - $3::bigint * interval '1 microsecond', now(),
        now() - $4::bigint * interval '1 microsecond',
        CASE WHEN $2 = 'dispatching' THEN 1 ELSE 0 END, CASE WHEN $2 = 'dispatching' THEN 1 END)
RETURNING id`, "retention:"+label, in.state, in.createdAgo.Microseconds(), finished).Scan(&id)
		if err != nil {
			t.Fatalf("insert %s: %v", label, err)
		}
		ids[label] = id
		if in.attemptAndEvent {
			if _, err := b.pool.Exec(ctx, `INSERT INTO outbox_attempts (intent_id, attempt, started_at, finished_at, outcome) VALUES ($1, 1, now(), now(), 'succeeded')`, id); err != nil {
				t.Fatal(err)
			}
			if _, err := b.pool.Exec(ctx, `INSERT INTO outbox_events (intent_id, actor, from_state, to_state) VALUES ($1, 'dispatcher', 'pending', $2)`, id, in.state); err != nil {
				t.Fatal(err)
			}
		}
	}
	return ids
}

func (b *testBundle) strings(t *testing.T, sql string, args ...any) []string {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), sql, args...)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

func TestPruneOnceDeletesExactlyWhatIsPastEachWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, options{})
	cfg := b.config()
	cfg.DedupWindow = 2 * time.Hour
	cfg.AuditRetention = 48 * time.Hour
	cfg.RetentionBatch = 2 // several batches per pass
	d, err := dispatcher.New(b.pool, cfg)
	if err != nil {
		t.Fatal(err)
	}

	const day = 24 * time.Hour
	intents := map[string]oldIntent{
		"succeeded-old":     {state: "succeeded", createdAgo: 60 * day, finishedAgo: 49 * time.Hour, attemptAndEvent: true},
		"failed-old":        {state: "failed", createdAgo: 60 * day, finishedAgo: 3 * day},
		"cancelled-old":     {state: "cancelled", createdAgo: 60 * day, finishedAgo: 59 * day, attemptAndEvent: true},
		"succeeded-recent":  {state: "succeeded", createdAgo: 60 * day, finishedAgo: 47 * time.Hour, attemptAndEvent: true},
		"failed-recent":     {state: "failed", createdAgo: 3 * time.Hour, finishedAgo: time.Hour},
		"cancelled-recent":  {state: "cancelled", createdAgo: 90 * day, finishedAgo: time.Minute},
		"succeeded-not-yet": {state: "succeeded", createdAgo: time.Minute, finishedAgo: time.Second},
		// Never deleted, however old: not finished.
		"in-doubt-old":    {state: "in_doubt", createdAgo: 90 * day, attemptAndEvent: true},
		"pending-old":     {state: "pending", createdAgo: 90 * day},
		"dispatching-old": {state: "dispatching", createdAgo: 90 * day, attemptAndEvent: true},
	}
	ids := b.oldRows(t,
		map[string]time.Duration{
			"old-1": 3 * time.Hour, "old-2": 5 * time.Hour, "old-3": 30 * day, "old-4": 2*time.Hour + time.Minute, "old-5": 100 * day,
			"fresh-1": time.Hour, "fresh-2": 2*time.Hour - time.Minute, "fresh-3": 0,
		},
		intents)
	// The activity chart's minutes: two past the audit retention.
	if _, err := b.pool.Exec(ctx, `INSERT INTO outbox_activity_minutes (minute, recorded, succeeded, finished)
		SELECT date_trunc('minute', now() - ago), 1, 1, 1
		FROM unnest(ARRAY[interval '49 hours', interval '3 days', interval '47 hours', interval '1 hour']) AS ago`); err != nil {
		t.Fatal(err)
	}

	pruned, err := d.PruneOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := (dispatcher.Pruned{Markers: 5, Intents: 3, ActivityMinutes: 2}); pruned != want {
		t.Errorf("PruneOnce = %+v, want %+v", pruned, want)
	}
	if got, want := b.strings(t, `SELECT message_id FROM outbox_processed_messages WHERE consumer = 'retention'`), []string{"fresh-1", "fresh-2", "fresh-3"}; !slices.Equal(got, want) {
		t.Errorf("markers left = %v, want %v", got, want)
	}
	wantLeft := []string{"dispatching-old", "failed-recent", "in-doubt-old", "pending-old", "succeeded-not-yet", "cancelled-recent", "succeeded-recent"}
	slices.Sort(wantLeft)
	var left []string
	for _, key := range b.strings(t, `SELECT idempotency_key FROM outbox_intents WHERE idempotency_key LIKE 'retention:%'`) {
		left = append(left, strings.TrimPrefix(key, "retention:"))
	}
	slices.Sort(left)
	if !slices.Equal(left, wantLeft) {
		t.Errorf("intents left = %v, want %v", left, wantLeft)
	}
	// Attempts and events went with their intents, and only with them.
	for label, id := range ids {
		var attempts, events int
		if err := b.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM outbox_attempts WHERE intent_id = $1), (SELECT count(*) FROM outbox_events WHERE intent_id = $1)`, id).Scan(&attempts, &events); err != nil {
			t.Fatal(err)
		}
		want := 0
		if slices.Contains(wantLeft, label) && intents[label].attemptAndEvent {
			want = 1
		}
		if attempts != want || events != want {
			t.Errorf("intent %s: %d attempts and %d events left, want %d of each", label, attempts, events, want)
		}
	}

	again, err := d.PruneOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if again != (dispatcher.Pruned{}) {
		t.Errorf("second PruneOnce = %+v, want nothing deleted", again)
	}
}

func TestRetentionRunsAsAPeriodicJob(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	b.oldRows(t, map[string]time.Duration{"old": 8 * 24 * time.Hour, "fresh": time.Hour}, nil)
	b.start(t, b.config()) // defaults: 7-day dedup window, pass on election

	deadline := time.Now().Add(30 * time.Second)
	for {
		left := b.strings(t, `SELECT message_id FROM outbox_processed_messages WHERE consumer = 'retention'`)
		if slices.Equal(left, []string{"fresh"}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("markers left after 30s = %v, want [fresh]: the leader's retention pass did not run", left)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestDedupWindowShorterThanTheRetryHorizonIsRefused(t *testing.T) {
	t.Parallel()
	sp, err := stripeprovider.New(stripeprovider.Config{APIKey: "sk_test_x"})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := providers.NewRegistry(sp)
	if err != nil {
		t.Fatal(err)
	}

	cfg := &dispatcher.Config{Providers: reg, MaxAttempts: 10, RetryBackoffMax: 10 * time.Minute, DedupWindow: time.Hour}
	err = cfg.Validate()
	want := "DedupWindow (1h) is shorter than the retry horizon (10 attempts × 10m = 1h40m)"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Validate() = %v, want an error containing %q", err, want)
	}

	// The largest per-kind bound counts.
	cfg = &dispatcher.Config{Providers: reg, MaxAttempts: 3, MaxAttemptsByKind: map[string]int{stripeprovider.KindPaymentIntent: 30},
		RetryBackoffMax: time.Hour, DedupWindow: 24 * time.Hour}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "(30 attempts × 1h = 30h)") {
		t.Fatalf("Validate() = %v, want the horizon of the per-kind bound, 30 attempts × 1h = 30h", err)
	}

	// A window that covers the horizon, and the defaults, are accepted.
	for _, cfg := range []*dispatcher.Config{
		{Providers: reg, MaxAttempts: 10, RetryBackoffMax: 10 * time.Minute, DedupWindow: 100 * time.Minute},
		{Providers: reg},
	} {
		if err := cfg.Validate(); err != nil {
			t.Errorf("Validate(%+v) = %v, want nil", cfg, err)
		}
	}
}
