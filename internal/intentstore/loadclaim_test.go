package intentstore_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/internal/intentstore"
)

// LoadClaim claims, in the statement that loads it, exactly the intent the
// dispatcher would attempt at once, under the key it would derive; any
// other intent is loaded and left as it is.
func TestLoadClaimClaimsOnlyWhatTheRulesAllow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.Now()
	rules := func() *intentstore.ClaimRules {
		return &intentstore.ClaimRules{Namespace: "ns", MaxAttempts: 3, MaxKeyLength: map[string]int{"sendgrid": 0}}
	}
	for _, tc := range []struct {
		name  string
		rules func(*intentstore.ClaimRules)
		claim bool
	}{
		{name: "pending, served here", claim: true},
		{name: "provider not served here", rules: func(r *intentstore.ClaimRules) { r.MaxKeyLength = map[string]int{"stripe": 255} }},
		{name: "budget used up by its kind's bound", rules: func(r *intentstore.ClaimRules) {
			r.MaxAttemptsByKind = map[string]int{"sendgrid.email": 0}
		}},
		{name: "key too long for the provider whole", rules: func(r *intentstore.ClaimRules) { r.MaxKeyLength["sendgrid"] = 10 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			store, load, id := setup(t)
			r := rules()
			if tc.rules != nil {
				tc.rules(r)
			}
			got, err := store.LoadClaim(ctx, id, r, now)
			if err != nil {
				t.Fatal(err)
			}
			if got.Row.ID != id || got.Row.State != intenttype.StatePending || got.Row.AttemptCount != 0 {
				t.Fatalf("loaded row = %+v, want the pending intent as it was", got.Row)
			}
			after := load(id)
			if !tc.claim {
				if got.Claim != nil || after.State != intenttype.StatePending {
					t.Fatalf("claim = %+v, row after = %+v; want no claim", got.Claim, after)
				}
				return
			}
			want := intenttype.ProviderKey("ns", 0, "orders:m1", 0)
			if got.Claim == nil || got.Claim.Attempt != 1 || got.Claim.ProviderKey != want || got.Claim.Namespace != "ns" {
				t.Fatalf("claim = %+v, want attempt 1 under %q", got.Claim, want)
			}
			if after.State != intenttype.StateDispatching || after.ClaimedAttempt != 1 || after.ProviderKey != want {
				t.Fatalf("row after the claim = %+v", after)
			}
		})
	}
	t.Run("may have acted", func(t *testing.T) {
		t.Parallel()
		store, load, id := setup(t)
		// An attempt whose outcome is lost: the intent goes back to
		// pending, may have acted.
		c, err := store.Claim(ctx, intentstore.ClaimParams{Row: load(id), ProviderKey: "ns.0/orders:m1", Namespace: "ns", Now: now})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.Settle(ctx, intentstore.Settlement{Row: load(id), From: intenttype.StateDispatching, Attempt: c.Attempt,
			To: intenttype.StatePending, MayHaveActed: true, LastError: "lost",
			Outcome: &intentstore.AttemptOutcome{Finished: now, Outcome: "retry"}}); err != nil {
			t.Fatal(err)
		}
		got, err := store.LoadClaim(ctx, id, rules(), now)
		if err != nil || got.Claim != nil || !got.Row.MayHaveActed {
			t.Fatalf("LoadClaim = %+v, %v; want the row, may have acted, not claimed", got, err)
		}
	})
	t.Run("no such intent", func(t *testing.T) {
		t.Parallel()
		store, _, id := setup(t)
		if _, err := store.LoadClaim(ctx, id+1000, rules(), now); !errors.Is(err, pgx.ErrNoRows) {
			t.Fatalf("LoadClaim of a missing intent = %v, want pgx.ErrNoRows", err)
		}
	})
}

// Two jobs for one intent load it at once: only one claims it, and the
// other sees it pending as it was, with no claim.
func TestLoadClaimClaimsOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, load, id := setup(t)
	rules := &intentstore.ClaimRules{Namespace: "ns", MaxAttempts: 3, MaxKeyLength: map[string]int{"sendgrid": 0}}
	const n = 8
	var wg sync.WaitGroup
	claims := make([]*intentstore.Claim, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			var got intentstore.Loaded
			got, errs[i] = store.LoadClaim(ctx, id, rules, time.Now())
			claims[i] = got.Claim
		})
	}
	wg.Wait()
	var claimed int
	for i := range n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if claims[i] != nil {
			claimed++
		}
	}
	if claimed != 1 {
		t.Fatalf("%d of %d concurrent LoadClaims claimed the intent, want 1", claimed, n)
	}
	if r := load(id); r.AttemptCount != 1 || !strings.HasPrefix(r.ProviderKey, "ns.0/") {
		t.Fatalf("row = %+v, want one attempt", r)
	}
}
