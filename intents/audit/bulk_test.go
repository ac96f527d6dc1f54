package audit_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/outboxkit/outbox/intents/audit"
	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
)

func TestActAllDryRunRealRunAndRefusals(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var doubt []int64
	for i := range 5 {
		id := b.record(t, "billing", fmt.Sprintf("bulk-%d", i), "", sendgridprovider.KindEmail, emailPayload)
		b.setState(t, id, intenttype.StateInDoubt)
		doubt = append(doubt, id)
	}
	flying := b.record(t, "billing", "bulk-flying", "", sendgridprovider.KindEmail, emailPayload)
	b.setState(t, flying, intenttype.StateDispatching)
	pending := b.record(t, "billing", "bulk-pending", "", sendgridprovider.KindEmail, emailPayload)
	other := b.record(t, "mailer", "bulk-other", "", sendgridprovider.KindEmail, emailPayload)
	b.setState(t, other, intenttype.StateInDoubt)
	all := append(append([]int64{}, doubt...), flying, pending, other)
	snapshots := func() map[int64]snapshot {
		out := map[int64]snapshot{}
		for _, id := range all {
			out[id] = b.snapshot(t, id)
		}
		return out
	}

	f := audit.Filter{States: []intenttype.State{intenttype.StateInDoubt, intenttype.StateDispatching, intenttype.StatePending}, Consumer: "billing"}
	a := audit.BulkAction{Kind: audit.ActionResolve, As: intenttype.StateFailed, Actor: "ann", Reason: "SendGrid shows none of them"}

	// Refused before anything: no reason, no states.
	if _, err := b.store.ActAll(ctx, f, audit.BulkAction{Kind: audit.ActionResend, Actor: "ann"}, false, nil); !errors.Is(err, audit.ErrInvalidInput) {
		t.Errorf("no reason: %v", err)
	}
	if _, err := b.store.ActAll(ctx, audit.Filter{Consumer: "billing"}, a, false, nil); !errors.Is(err, audit.ErrInvalidFilter) {
		t.Errorf("no states: %v", err)
	}

	before := snapshots()
	res, err := b.store.ActAll(ctx, f, a, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !res.DryRun || res.Matched != 7 || res.Would != 5 || res.Done != 0 || res.Refused != 2 || res.Errors != 0 {
		t.Errorf("dry run = %+v", res)
	}
	if after := snapshots(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("a dry run changed rows:\n%v\n->\n%v", before, after)
	}

	// A real run; while it runs, the oldest in_doubt intent is resolved by
	// someone else: that one is refused, not overridden.
	changed := false
	progress := func(audit.BulkItem) {
		if !changed {
			changed = true
			if _, err := b.store.Resolve(ctx, doubt[0], intenttype.StateSucceeded, "bob", "found it"); err != nil {
				t.Error(err)
			}
		}
	}
	before = snapshots()
	res, err = b.store.ActAll(ctx, f, a, false, progress)
	if err != nil {
		t.Fatal(err)
	}
	if res.DryRun || res.Matched != 7 || res.Done != 4 || res.Refused != 3 || res.Errors != 0 {
		t.Errorf("real run = %+v", res)
	}
	after := snapshots()
	for _, id := range doubt[1:] {
		if st := b.lastEvent(t, id); st.ToState != intenttype.StateFailed || st.Actor != "operator:ann" || st.Reason != a.Reason {
			t.Errorf("intent %d: last event %+v", id, st)
		}
	}
	wantEvents := map[int64]int{doubt[0]: 1, flying: 0, pending: 0, other: 0} // doubt[0]: bob's event only
	for _, id := range doubt[1:] {
		wantEvents[id] = 1
	}
	for id, want := range wantEvents {
		if got := after[id].Events - before[id].Events; got != want {
			t.Errorf("intent %d: %d new events, want %d", id, got, want)
		}
	}
	for _, id := range []int64{flying, pending, other} {
		if after[id] != before[id] {
			t.Errorf("intent %d changed: %v -> %v", id, before[id], after[id])
		}
	}
	if e := b.lastEvent(t, doubt[0]); e.Actor != "operator:bob" || e.ToState != intenttype.StateSucceeded {
		t.Errorf("the concurrently resolved intent was overridden: %+v", e)
	}
}

// A confirmed bulk (with Seen) sent again with its action id, after a lost
// answer, applies nothing twice and reports what its first run did: the
// intents it moved no longer match the filter, and are done; one someone
// else moved meanwhile is refused, saying what it is now.
func TestActAllSentAgainReportsWhatItsFirstRunDid(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var doubt []int64
	for i := range 3 {
		id := b.record(t, "billing", fmt.Sprintf("again-%d", i), "", sendgridprovider.KindEmail, emailPayload)
		b.setState(t, id, intenttype.StateInDoubt)
		doubt = append(doubt, id)
	}
	f := audit.Filter{States: []intenttype.State{intenttype.StateInDoubt}}
	preview, err := b.store.ActAll(ctx, f, audit.BulkAction{Kind: audit.ActionResolve, As: intenttype.StateSucceeded, Actor: "ann", Reason: "preview"}, true, nil)
	if err != nil || preview.Would != 3 {
		t.Fatalf("preview = %+v, %v", preview, err)
	}
	seen := map[int64]intenttype.Version{}
	for _, it := range preview.Items {
		seen[it.IntentID] = it.Version
	}
	a := audit.BulkAction{Kind: audit.ActionResolve, As: intenttype.StateSucceeded, Actor: "ann", Reason: "delivered, per the activity feed", ActionID: "form_again", Seen: seen}
	// Someone else resolves one before the bulk runs.
	if _, err := b.store.Resolve(ctx, doubt[0], intenttype.StateFailed, "bob", "bounced"); err != nil {
		t.Fatal(err)
	}
	first, err := b.store.ActAll(ctx, f, a, false, nil)
	if err != nil || first.Matched != 2 || first.Done != 2 || first.Refused != 1 {
		t.Fatalf("first run = %+v, %v; want 2 matched and done, bob's refused", first, err)
	}
	events := map[int64]int{}
	for _, id := range doubt {
		events[id] = b.snapshot(t, id).Events
	}
	again, err := b.store.ActAll(ctx, f, a, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if again.Matched != 0 || again.Done != 2 || again.Refused != 1 || len(again.Items) != 3 {
		t.Errorf("sent again = %+v; want nothing matched, the two done already, bob's refused", again)
	}
	for _, it := range again.Items {
		switch {
		case it.IntentID == doubt[0] && (it.Outcome != audit.BulkRefused || it.Why != "it no longer matches the filter: it is failed now"):
			t.Errorf("bob's intent, sent again: %+v", it)
		case it.IntentID != doubt[0] && (it.Outcome != audit.BulkDone || it.From != intenttype.StateSucceeded):
			t.Errorf("intent %d, sent again: %+v; want done already", it.IntentID, it)
		}
	}
	for _, id := range doubt {
		if got := b.snapshot(t, id).Events; got != events[id] {
			t.Errorf("intent %d: sent again, %d events, was %d", id, got, events[id])
		}
	}
	// A dry run of the same does nothing and says so.
	dry, err := b.store.ActAll(ctx, f, a, true, nil)
	if err != nil || dry.Done != 0 || dry.Refused != 3 {
		t.Errorf("dry run sent again = %+v, %v; want every intent refused, none done", dry, err)
	}
}
