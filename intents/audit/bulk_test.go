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
