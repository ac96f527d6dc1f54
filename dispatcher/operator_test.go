package dispatcher_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox/intents/audit"
	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/internal/testkit/fixture"
	"github.com/outboxkit/outbox/providers/fault"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
)

// inDoubtEmail records an email whose send SendGrid accepts and answers
// 500, starts a dispatcher, and returns the intent once in_doubt.
func (b *testBundle) inDoubtEmail(t *testing.T) intenttype.Intent {
	t.Helper()
	b.sendgrid.Faults().Push(fault.Fault{Kind: fault.ErrorAfter, Status: 500})
	id := b.record(t, sendgridprovider.KindEmail, emailPayload)
	if s := b.waitSettled(t, id); s.State != intenttype.StateInDoubt {
		t.Fatalf("intent = %+v, want in_doubt", s)
	}
	d, err := fixture.Audit(t, b.pool, b.registry).Get(context.Background(), strconv.FormatInt(id, 10))
	if err != nil {
		t.Fatal(err)
	}
	return d.Intent
}

// An operator acts on what they saw (DESIGN.md, invariant 11). Ann lists
// an in_doubt email; Bob resends it, it goes out again and comes back
// in_doubt: the same state Ann saw, a later version. Ann's resend and her
// bulk resend from that view are refused; the email went twice, not three
// times.
func TestAResendFromAStaleViewIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, options{})
	b.start(t, b.config())
	store := fixture.Audit(t, b.pool, b.registry)
	seen := b.inDoubtEmail(t)
	v := seen.Version()

	b.sendgrid.Faults().Push(fault.Fault{Kind: fault.ErrorAfter, Status: 500})
	if _, err := store.Act(ctx, audit.Action{Kind: audit.ActionResend, IntentID: seen.ID, Actor: "bob", Reason: "not in the activity feed", IfVersion: &v}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, "the resend to go out and come back in_doubt", func() bool {
		s := b.intent(t, seen.ID)
		return s.State == intenttype.StateInDoubt && b.sendgrid.EffectsFor(seen.ID) == 2
	})

	_, err := store.Act(ctx, audit.Action{Kind: audit.ActionResend, IntentID: seen.ID, Actor: "ann", Reason: "as listed", IfState: intenttype.StateInDoubt, IfVersion: &v})
	var te *audit.TransitionError
	if !errors.As(err, &te) || te.Seen == nil || *te.Seen != v || !strings.Contains(err.Error(), "changed since it was seen") {
		t.Fatalf("Ann's resend from her stale view = %v, want a TransitionError naming the version she saw", err)
	}
	res, err := store.ActAll(ctx, audit.Filter{States: []intenttype.State{intenttype.StateInDoubt}},
		audit.BulkAction{Kind: audit.ActionResend, Actor: "ann", Reason: "bulk, as listed", Seen: map[int64]intenttype.Version{seen.ID: v}}, false, nil)
	if err != nil || res.Done != 0 || res.Refused != 1 {
		t.Fatalf("Ann's bulk resend from her stale view = %+v, %v; want it refused", res, err)
	}
	if n := b.sendgrid.EffectsFor(seen.ID); n != 2 {
		t.Fatalf("the SendGrid double sent %d emails, want 2", n)
	}
}

// An action is applied once, whatever answer its caller lost (DESIGN.md,
// invariant 11): a resend retried with its action id after it went out and
// came back in_doubt is found applied, not sent a third time.
func TestAResendRetriedWithItsActionIDIsAppliedOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, options{})
	b.start(t, b.config())
	store := fixture.Audit(t, b.pool, b.registry)
	in := b.inDoubtEmail(t)

	resend := audit.Action{Kind: audit.ActionResend, IntentID: in.ID, Actor: "ann", Reason: "checked", ActionID: "req-7f3a"}
	b.sendgrid.Faults().Push(fault.Fault{Kind: fault.ErrorAfter, Status: 500})
	if _, err := store.Act(ctx, resend); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, "the resend to go out and come back in_doubt", func() bool {
		return b.intent(t, in.ID).State == intenttype.StateInDoubt && b.sendgrid.EffectsFor(in.ID) == 2
	})
	again, err := store.Act(ctx, resend)
	if err != nil || again.State != intenttype.StateInDoubt {
		t.Fatalf("the same resend again = %+v, %v; want it found applied, the intent as it is", again, err)
	}
	if n := testkit.Count(t, b.pool, `SELECT count(*) FROM outbox_intent_events WHERE intent_id = $1 AND action_id = 'req-7f3a'`, in.ID); n != 1 {
		t.Fatalf("%d events carry the action id, want 1", n)
	}
	if n := b.sendgrid.EffectsFor(in.ID); n != 2 {
		t.Fatalf("the SendGrid double sent %d emails, want 2", n)
	}
}

// A resend whose commit's acknowledgement is lost (the connection drops
// after the server committed) is found applied when the store tries again:
// the operator gets the intent, resent once, not an error or a second
// resend.
func TestAResendWhoseCommitAckIsLostIsAppliedOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, options{})
	b.start(t, b.config())
	in := b.inDoubtEmail(t)

	proxied, proxy := testkit.LostAckPool(t, b.pool)
	store := fixture.Audit(t, proxied, b.registry)

	proxy.Arm(1)
	got, err := store.Resend(ctx, in.ID, "ann", "checked")
	if err != nil {
		t.Fatalf("Resend whose commit's acknowledgement was lost = %v, want it found applied", err)
	}
	if proxy.Lost() != 1 {
		t.Fatalf("the proxy lost %d acknowledgements, want 1", proxy.Lost())
	}
	if got.KeyGeneration != in.KeyGeneration+1 {
		t.Fatalf("key generation %d after one resend of generation %d", got.KeyGeneration, in.KeyGeneration)
	}
	if n := testkit.Count(t, b.pool, `SELECT count(*) FROM outbox_intent_events WHERE intent_id = $1 AND from_state = 'in_doubt' AND to_state = 'pending'`, in.ID); n != 1 {
		t.Fatalf("%d resend events, want 1", n)
	}
}
