package audit_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/outbox/intents/audit"
	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
)

func TestLegalTransitionsWriteOneEventWithActorAndReason(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	for i, tc := range []struct {
		name   string
		from   intenttype.State
		act    func(id int64) (intenttype.Intent, error)
		to     intenttype.State
		reason string
	}{
		{"resend in_doubt", intenttype.StateInDoubt, func(id int64) (intenttype.Intent, error) {
			return b.store.Resend(ctx, id, "alice", "not in the provider's dashboard")
		}, intenttype.StatePending, "not in the provider's dashboard"},
		{"resend failed", intenttype.StateFailed, func(id int64) (intenttype.Intent, error) {
			return b.store.Resend(ctx, id, "alice", "the card was replaced")
		}, intenttype.StatePending, "the card was replaced"},
		{"cancel pending", intenttype.StatePending, func(id int64) (intenttype.Intent, error) {
			return b.store.Cancel(ctx, id, "alice", "order withdrawn")
		}, intenttype.StateCancelled, "order withdrawn"},
		{"cancel pending, actor prefixed, no reason", intenttype.StatePending, func(id int64) (intenttype.Intent, error) {
			return b.store.Cancel(ctx, id, "operator:alice", "")
		}, intenttype.StateCancelled, ""},
		{"resolve succeeded", intenttype.StateInDoubt, func(id int64) (intenttype.Intent, error) {
			return b.store.Resolve(ctx, id, intenttype.StateSucceeded, "alice", "found in SendGrid's activity feed")
		}, intenttype.StateSucceeded, "found in SendGrid's activity feed"},
		{"resolve failed", intenttype.StateInDoubt, func(id int64) (intenttype.Intent, error) {
			return b.store.Resolve(ctx, id, intenttype.StateFailed, "alice", "bounced")
		}, intenttype.StateFailed, "bounced"},
	} {
		id := b.record(t, "billing", fmt.Sprintf("legal-%d", i), "", sendgridprovider.KindEmail, emailPayload)
		b.setState(t, id, tc.from)
		before := b.snapshot(t, id)

		got, err := tc.act(id)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		after := b.snapshot(t, id)
		if got.ID != id || got.State != tc.to {
			t.Errorf("%s: returned intent %+v, want state %s", tc.name, got, tc.to)
		}
		if after.Events != before.Events+1 {
			t.Errorf("%s: %d events written, want exactly 1", tc.name, after.Events-before.Events)
		}
		e := b.lastEvent(t, id)
		if e.Actor != "operator:alice" || e.FromState != tc.from || e.ToState != tc.to || e.Reason != tc.reason {
			t.Errorf("%s: event = %+v, want operator:alice %s -> %s %q", tc.name, e, tc.from, tc.to, tc.reason)
		}
		var newKey, freshBudget, finished bool
		if err := b.pool.QueryRow(ctx, `SELECT key_generation = 1 AND provider_key IS NULL AND NOT may_have_acted,
				budget_from = attempt_count, finished_at IS NOT NULL FROM outbox_intents WHERE id = $1`, id).Scan(&newKey, &freshBudget, &finished); err != nil {
			t.Fatal(err)
		}
		if tc.to == intenttype.StatePending {
			if !newKey || !freshBudget || after.Dispatchable != 1 || before.Dispatchable != 0 {
				t.Errorf("%s: new key generation %v, fresh budget %v, queued or River jobs %d -> %d; want a new key, a fresh budget, and queued",
					tc.name, newKey, freshBudget, before.Dispatchable, after.Dispatchable)
			}
		} else if !finished || got.FinishedAt == nil {
			t.Errorf("%s: finished %v; want a finished intent", tc.name, finished)
		}
	}
}

// A failed intent is sent again only where no attempt may have acted and
// nothing was recorded after it: out of the finished counts, back in the
// queue under a new key; refused (and changed in nothing) otherwise.
func TestResendOfAFailedIntent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	failedCount := func() int {
		st, err := b.store.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st.ByState[intenttype.StateFailed]
	}
	declined := b.record(t, "billing", "declined", "", sendgridprovider.KindEmail, emailPayload)
	b.setState(t, declined, intenttype.StateFailed)
	resolved := b.record(t, "billing", "resolved", "", sendgridprovider.KindEmail, emailPayload)
	b.setState(t, resolved, intenttype.StateFailed)
	if _, err := b.pool.Exec(ctx, `UPDATE outbox_intents SET may_have_acted = true WHERE id = $1`, resolved); err != nil {
		t.Fatal(err)
	}
	waitedFor := b.record(t, "billing", "waited-for", "", sendgridprovider.KindEmail, emailPayload)
	b.setState(t, waitedFor, intenttype.StateFailed)
	if _, err := b.pool.Exec(ctx, `UPDATE outbox_intents SET has_dependents = true WHERE id = $1`, waitedFor); err != nil {
		t.Fatal(err)
	}
	if n := failedCount(); n != 3 {
		t.Fatalf("%d failed before, want 3", n)
	}
	for _, id := range []int64{resolved, waitedFor} {
		before := b.snapshot(t, id)
		_, err := b.store.Resend(ctx, id, "alice", "again")
		var te *audit.TransitionError
		if !errors.As(err, &te) || te.Why == "" {
			t.Fatalf("resend of failed intent %d = %v, want a *TransitionError saying why", id, err)
		}
		if after := b.snapshot(t, id); after != before {
			t.Errorf("a refused resend changed intent %d:\nbefore %+v\nafter  %+v", id, before, after)
		}
	}
	got, err := b.store.Resend(ctx, declined, "alice", "the card was replaced")
	if err != nil || got.State != intenttype.StatePending || got.FinishedAt != nil || got.KeyGeneration != 1 {
		t.Fatalf("resend of a declined intent = %+v, %v; want pending, unfinished, key generation 1", got, err)
	}
	if n := failedCount(); n != 2 {
		t.Fatalf("%d failed after the resend, want 2: it left the finished counts", n)
	}
}

func TestIllegalTransitionsChangeNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	for i, tc := range []struct {
		from    intenttype.State
		action  audit.ActionKind
		as      intenttype.State
		allowed []intenttype.State
	}{
		{intenttype.StateSucceeded, audit.ActionResend, "", []intenttype.State{intenttype.StateInDoubt, intenttype.StateFailed}},
		{intenttype.StatePending, audit.ActionResend, "", []intenttype.State{intenttype.StateInDoubt, intenttype.StateFailed}},
		{intenttype.StateDispatching, audit.ActionResend, "", []intenttype.State{intenttype.StateInDoubt, intenttype.StateFailed}},
		{intenttype.StateCancelled, audit.ActionResend, "", []intenttype.State{intenttype.StateInDoubt, intenttype.StateFailed}},
		{intenttype.StatePending, audit.ActionResolve, intenttype.StateSucceeded, []intenttype.State{intenttype.StateInDoubt}},
		{intenttype.StateFailed, audit.ActionResolve, intenttype.StateSucceeded, []intenttype.State{intenttype.StateInDoubt}},
		{intenttype.StateSucceeded, audit.ActionResolve, intenttype.StateFailed, []intenttype.State{intenttype.StateInDoubt}},
		{intenttype.StateFailed, audit.ActionCancel, "", []intenttype.State{intenttype.StatePending, intenttype.StateWaiting}},
		{intenttype.StateSucceeded, audit.ActionCancel, "", []intenttype.State{intenttype.StatePending, intenttype.StateWaiting}},
		{intenttype.StateDispatching, audit.ActionCancel, "", []intenttype.State{intenttype.StatePending, intenttype.StateWaiting}},
		{intenttype.StateCancelled, audit.ActionCancel, "", []intenttype.State{intenttype.StatePending, intenttype.StateWaiting}},
		// An in_doubt intent may have acted: it is resolved, never cancelled.
		{intenttype.StateInDoubt, audit.ActionCancel, "", []intenttype.State{intenttype.StatePending, intenttype.StateWaiting}},
	} {
		name := fmt.Sprintf("%s a %s intent", tc.action, tc.from)
		id := b.record(t, "billing", fmt.Sprintf("illegal-%d", i), "", sendgridprovider.KindEmail, emailPayload)
		b.setState(t, id, tc.from)
		before := b.snapshot(t, id)

		_, err := b.store.Act(ctx, audit.Action{Kind: tc.action, IntentID: id, As: tc.as, Actor: "alice", Reason: "trying"})
		var te *audit.TransitionError
		if !errors.As(err, &te) {
			t.Fatalf("%s: %v, want a *TransitionError", name, err)
		}
		if te.IntentID != id || te.From != tc.from || te.Action != string(tc.action) || !slices.Equal(te.Allowed, tc.allowed) {
			t.Errorf("%s: %+v", name, te)
		}
		for _, want := range []string{string(tc.from), string(tc.action), "allowed only from " + string(tc.allowed[0])} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error %q does not say %q", name, err, want)
			}
		}
		if after := b.snapshot(t, id); after != before {
			t.Errorf("%s changed the intent:\nbefore %+v\nafter  %+v", name, before, after)
		}
	}
}

func TestBadActionArgumentsChangeNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	id := b.record(t, "billing", "args", "", sendgridprovider.KindEmail, emailPayload)
	b.setState(t, id, intenttype.StateInDoubt)
	before := b.snapshot(t, id)
	for _, tc := range []struct {
		action audit.Action
		field  string
	}{
		{audit.Action{Kind: audit.ActionCancel, IntentID: id, Actor: ""}, "actor"},
		{audit.Action{Kind: audit.ActionCancel, IntentID: id, Actor: "operator:"}, "actor"},
		{audit.Action{Kind: audit.ActionCancel, IntentID: id, Actor: "   "}, "actor"},
		{audit.Action{Kind: audit.ActionCancel, IntentID: id, Actor: "al\tice"}, "actor"},
		{audit.Action{Kind: audit.ActionCancel, IntentID: id, Actor: strings.Repeat("a", audit.MaxActorLength+1)}, "actor"},
		{audit.Action{Kind: audit.ActionCancel, IntentID: id, Actor: "alice", Reason: strings.Repeat("r", audit.MaxReasonLength+1)}, "reason"},
		{audit.Action{Kind: audit.ActionCancel, IntentID: id, Actor: "alice", Reason: "two\nlines"}, "reason"},
		{audit.Action{Kind: audit.ActionCancel, IntentID: id, Actor: "alice", Reason: "\xff"}, "reason"},
		{audit.Action{Kind: audit.ActionResolve, IntentID: id, Actor: "alice", As: intenttype.StateSucceeded}, "reason"},
		{audit.Action{Kind: audit.ActionResolve, IntentID: id, Actor: "alice", As: intenttype.StatePending, Reason: "x"}, "as"},
		{audit.Action{Kind: audit.ActionResolve, IntentID: id, Actor: "alice", As: intenttype.StateCancelled, Reason: "x"}, "as"},
		{audit.Action{Kind: audit.ActionCancel, IntentID: id, Actor: "alice", As: intenttype.StateFailed}, "as"},
		{audit.Action{Kind: audit.ActionCancel, IntentID: id, Actor: "alice", IfState: "maybe"}, "if_state"},
		{audit.Action{Kind: "delete", IntentID: id, Actor: "alice"}, "kind"},
		{audit.Action{Kind: audit.ActionCancel, IntentID: 0, Actor: "alice"}, "id"},
		{audit.Action{Kind: audit.ActionResolve, IntentID: id, Actor: "alice", As: intenttype.StateFailed, Reason: "x", ProviderRef: "pi_1"}, "provider_ref"},
		{audit.Action{Kind: audit.ActionResend, IntentID: id, Actor: "alice", ProviderRef: "pi_1"}, "provider_ref"},
		{audit.Action{Kind: audit.ActionResolve, IntentID: id, Actor: "alice", As: intenttype.StateSucceeded, Reason: "x", ProviderRef: "pi 1"}, "provider_ref"},
		{audit.Action{Kind: audit.ActionResolve, IntentID: id, Actor: "alice", As: intenttype.StateSucceeded, Reason: "x", ProviderRef: "pi_1\x1b[2J"}, "provider_ref"},
		{audit.Action{Kind: audit.ActionResolve, IntentID: id, Actor: "alice", As: intenttype.StateSucceeded, Reason: "x", ProviderRef: strings.Repeat("p", audit.MaxProviderRefLength+1)}, "provider_ref"},
	} {
		_, err := b.store.Act(ctx, tc.action)
		var fe *audit.FieldError
		if !errors.Is(err, audit.ErrInvalidInput) || !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("Act(%+v) = %v, want ErrInvalidInput naming %s", tc.action, err, tc.field)
		}
	}
	if after := b.snapshot(t, id); after != before {
		t.Errorf("bad arguments changed the intent:\nbefore %+v\nafter  %+v", before, after)
	}
	if _, err := b.store.Cancel(ctx, 999999, "alice", ""); !errors.Is(err, audit.ErrNotFound) {
		t.Errorf("Cancel of a missing intent = %v, want ErrNotFound", err)
	}
	// The longest reason is accepted.
	if _, err := b.store.Resolve(ctx, id, intenttype.StateFailed, "alice", strings.Repeat("r", audit.MaxReasonLength)); err != nil {
		t.Errorf("Resolve with a %d-byte reason: %v", audit.MaxReasonLength, err)
	}
}

// Two operators act at once on an in_doubt intent they both saw: one
// resends it, one cancels it. Exactly one wins; the other is told the
// state moved, and the history has exactly one operator event.
func TestConcurrentCancelAndResendExactlyOneWins(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	wins := map[string]int{}
	for round := range 12 {
		id := b.record(t, "billing", fmt.Sprintf("race-%d", round), "", sendgridprovider.KindEmail, emailPayload)
		b.setState(t, id, intenttype.StateInDoubt)
		before := b.snapshot(t, id)

		start := make(chan struct{})
		var wg sync.WaitGroup
		var resendErr, cancelErr error
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			_, resendErr = b.store.Act(ctx, audit.Action{Kind: audit.ActionResend, IntentID: id, Actor: "alice", Reason: "not sent", IfState: intenttype.StateInDoubt})
		}()
		go func() {
			defer wg.Done()
			<-start
			_, cancelErr = b.store.Act(ctx, audit.Action{Kind: audit.ActionResolve, As: intenttype.StateFailed, IntentID: id, Actor: "bob", Reason: "not at the provider", IfState: intenttype.StateInDoubt})
		}()
		close(start)
		testkit.WaitWithin(t, &wg, time.Minute)

		var winner, loserErr = "resend", cancelErr
		want := intenttype.StatePending
		if resendErr != nil {
			winner, loserErr, want = "resolve", resendErr, intenttype.StateFailed
			if cancelErr != nil {
				t.Fatalf("round %d: both failed: resend %v, resolve %v", round, resendErr, cancelErr)
			}
		}
		var te *audit.TransitionError
		if !errors.As(loserErr, &te) || te.Expected != intenttype.StateInDoubt || te.From != want {
			t.Fatalf("round %d: %s won; the other got %v, want a *TransitionError from %s", round, winner, loserErr, want)
		}
		wins[winner]++
		after := b.snapshot(t, id)
		if after.Events != before.Events+1 {
			t.Fatalf("round %d: %d events written, want 1", round, after.Events-before.Events)
		}
		if e := b.lastEvent(t, id); e.ToState != want {
			t.Fatalf("round %d: last event %+v, want to %s", round, e, want)
		}
	}
	t.Logf("wins: %v", wins)

	// Without IfState the actions serialise on the row lock and each is
	// checked against the state it finds: a cancel after a resend cancels
	// the now pending intent; a resend after a cancel is refused.
	id := b.record(t, "billing", "serial", "", sendgridprovider.KindEmail, emailPayload)
	b.setState(t, id, intenttype.StateInDoubt)
	if _, err := b.store.Resend(ctx, id, "alice", "x"); err != nil {
		t.Fatal(err)
	}
	if in, err := b.store.Cancel(ctx, id, "bob", "y"); err != nil || in.State != intenttype.StateCancelled {
		t.Fatalf("Cancel after Resend = %+v, %v", in, err)
	}
	var te *audit.TransitionError
	if _, err := b.store.Resend(ctx, id, "alice", "x"); !errors.As(err, &te) {
		t.Fatalf("Resend after Cancel = %v, want a *TransitionError", err)
	}
}

func TestStatsCountsByStateAndKind(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	empty, err := b.store.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if empty.Total != 0 || empty.OldestPendingAge != 0 || len(empty.ByState) != len(intenttype.States) {
		t.Errorf("Stats of an empty outbox = %+v", empty)
	}

	payments := b.recordN(t, "billing", 4)
	var emails []int64
	for i := range 3 {
		emails = append(emails, b.record(t, "mailer", fmt.Sprintf("e-%d", i), "", sendgridprovider.KindEmail, emailPayload))
	}
	b.setState(t, payments[0], intenttype.StateSucceeded)
	b.setState(t, payments[1], intenttype.StateFailed)
	b.setState(t, emails[0], intenttype.StateInDoubt)
	b.setState(t, emails[1], intenttype.StateInDoubt)
	b.setState(t, emails[2], intenttype.StateDispatching)
	if _, err := b.pool.Exec(ctx, `UPDATE outbox_intents SET created_at = now() - interval '3 hours' WHERE id = $1`, emails[2]); err != nil {
		t.Fatal(err)
	}
	st, err := b.store.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantByState := map[intenttype.State]int{"pending": 2, "dispatching": 1, "succeeded": 1, "failed": 1, "in_doubt": 2, "cancelled": 0, "waiting": 0}
	if fmt.Sprint(st.ByState) != fmt.Sprint(wantByState) || st.Total != 7 || st.InDoubt != 2 {
		t.Errorf("Stats = %+v, want by state %v, 7 in all, 2 in doubt", st, wantByState)
	}
	wantByKind := "map[sendgrid.email:map[dispatching:1 in_doubt:2] stripe.payment_intent:map[failed:1 pending:2 succeeded:1]]"
	if fmt.Sprint(st.ByKindState) != wantByKind {
		t.Errorf("ByKindState = %v, want %s", st.ByKindState, wantByKind)
	}
	if st.OldestPendingAge < 3*time.Hour || st.OldestPendingAge > 3*time.Hour+time.Minute {
		t.Errorf("OldestPendingAge = %s, want about 3h (the dispatching intent)", st.OldestPendingAge)
	}
}

// While counting is slow, Stats takes the dispatchers' saved count, as long
// as it is fresh, and says so; a fast or an old saved count is not taken,
// and LiveStats always counts.
func TestStatsTakesTheDispatchersCountWhileCountingIsSlow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.recordN(t, "billing", 2)
	save := func(pending int, took, age time.Duration) {
		t.Helper()
		if _, err := b.pool.Exec(ctx, `INSERT INTO outbox_counts_saved (by_kind_state, oldest_pending_micros, counted_at, took_micros)
			VALUES (jsonb_build_object('stripe.payment_intent', jsonb_build_object('pending', $3::int, 'succeeded', 100)), 60000000, now() - $1::bigint * interval '1 microsecond', $2)
			ON CONFLICT (one) DO UPDATE SET by_kind_state = excluded.by_kind_state, counted_at = excluded.counted_at, took_micros = excluded.took_micros`,
			age.Microseconds(), took.Microseconds(), pending); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		pending   int
		took, age time.Duration
		reused    bool
	}{
		{pending: 90000, took: 600 * time.Millisecond, age: 2 * time.Second, reused: true},
		{pending: 90000, took: 2 * time.Millisecond, age: 2 * time.Second},    // counting is fast: count
		{pending: 900, took: 600 * time.Millisecond, age: 2 * time.Second},    // slow, but for a few: a busy moment, count
		{pending: 90000, took: 600 * time.Millisecond, age: 20 * time.Second}, // the leader stopped counting: count
	} {
		save(c.pending, c.took, c.age)
		st, err := b.store.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !c.reused {
			if st.Reused || st.Total != 2 || st.ByState[intenttype.StatePending] != 2 {
				t.Errorf("Stats with a saved count of %d pending that took %s, %s old = %+v; want the 2 pending intents counted live", c.pending, c.took, c.age, st)
			}
			continue
		}
		if !st.Reused || st.Total != c.pending+100 || st.ByState[intenttype.StatePending] != c.pending || st.ByState[intenttype.StateFailed] != 0 {
			t.Errorf("Stats with a saved count that took %s, %s old = %+v; want the saved count", c.took, c.age, st)
		}
		if st.OldestPendingAge < time.Minute+c.age || st.OldestPendingAge > time.Minute+c.age+time.Minute {
			t.Errorf("OldestPendingAge = %s, want the saved minute and the count's age, %s", st.OldestPendingAge, c.age)
		}
		if age := time.Since(st.CountedAt); age < c.age || age > c.age+time.Minute {
			t.Errorf("CountedAt = %s, want about %s ago", st.CountedAt, c.age)
		}
		live, err := b.store.LiveStats(ctx)
		if err != nil || live.Reused || live.Total != 2 {
			t.Errorf("LiveStats = %+v, %v; want the 2 intents counted", live, err)
		}
	}
}
