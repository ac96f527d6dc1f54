package intentstore_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"pgregory.net/rapid"

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
			store, load, id := setupRiver(t)
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
		store, load, id := setupRiver(t)
		// An attempt whose outcome is lost: the intent goes back to
		// pending, may have acted.
		c, err := store.Claim(ctx, intentstore.ClaimParams{Row: load(id), ProviderKey: "ns.0/orders:m1", Namespace: "ns", Now: now})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.Settle(ctx, intentstore.Settlement{Row: load(id), From: intenttype.StateDispatching, Attempt: c.Attempt,
			To: intenttype.StatePending, MayHaveActed: true, LastError: "lost", RetryIn: time.Second,
			Outcome: &intentstore.AttemptOutcome{Finished: now, Outcome: "retry"}}); err != nil {
			t.Fatal(err)
		}
		got, err := store.LoadClaim(ctx, id, rules(), now)
		if err != nil || got.Claim != nil || !got.Row.MayHaveActed {
			t.Fatalf("LoadClaim = %+v, %v; want the row, may have acted, not claimed", got, err)
		}
	})
	t.Run("queued: the queue's, not a River job's", func(t *testing.T) {
		t.Parallel()
		store, load, id := setup(t)
		got, err := store.LoadClaim(ctx, id, rules(), now)
		if err != nil || got.Claim != nil || !got.Row.Queued || load(id).State != intenttype.StatePending {
			t.Fatalf("LoadClaim of a queued intent = %+v, %v; want the row, queued, not claimed", got, err)
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
	store, load, id := setupRiver(t)
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

// setupRiver is setup with the intent given to River (not queued), as a
// retry leaves it: what a dispatch job loads.
func setupRiver(t *testing.T) (*intentstore.Store, func(id int64) intentstore.Row, int64) {
	t.Helper()
	store, load, id := setup(t)
	if err := store.Unqueue(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	return store, load, id
}

// The statements' rule and ClaimRules.AttemptsAtOnce agree on any row:
// LoadClaim claims an intent River holds exactly when the Go rule says it
// would, and ClaimQueued a queued one, over every condition the rule names
// (state, may have acted, the budget and its kind's bound, the provider
// served here, a key fixed or derived whole within the provider's limit);
// a queued pending intent of a served provider that the rule refuses is
// handed to a River job, never left in the queue, and LoadClaim never
// claims a queued one.
func TestLoadClaimAgreesWithAttemptsAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, store := newStore(t)
	n := 0
	rapid.Check(t, func(rt *rapid.T) {
		n++
		provider := rapid.SampledFrom([]string{"sendgrid", "stripe"}).Draw(rt, "provider")
		rules := &intentstore.ClaimRules{
			Namespace:   rapid.SampledFrom([]string{"ns", "namespace0123"}).Draw(rt, "namespace"),
			MaxAttempts: rapid.IntRange(0, 4).Draw(rt, "max_attempts"),
			MaxKeyLength: map[string]int{
				"sendgrid": rapid.SampledFrom([]int{0, 20, 30}).Draw(rt, "sendgrid_limit"),
				"other":    255,
			},
		}
		if rapid.Bool().Draw(rt, "stripe_served") {
			rules.MaxKeyLength["stripe"] = rapid.SampledFrom([]int{0, 25, 300}).Draw(rt, "stripe_limit")
		}
		if rapid.Bool().Draw(rt, "kind_bound") {
			rules.MaxAttemptsByKind = map[string]int{provider + ".x": rapid.IntRange(0, 4).Draw(rt, "kind_max_attempts")}
		}
		// The derived key's length is drawn around the provider's limit.
		generation := rapid.IntRange(0, 12).Draw(rt, "generation")
		key := "k" + strconv.Itoa(n) + ":"
		if limit := rules.MaxKeyLength[provider]; limit > 0 && limit < 255 {
			derived := len(rules.Namespace) + len(strconv.Itoa(generation)) + 2 + len(key)
			key += strings.Repeat("x", max(0, limit-derived+rapid.IntRange(-1, 1).Draw(rt, "past_limit")))
		}
		var ib intentstore.InsertBatch
		ib.Add(intentstore.NewIntent{Key: key, Kind: provider + ".x", Provider: provider, Payload: []byte(`{}`), Actor: "test"})
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return store.InsertTx(ctx, tx, &ib) }); err != nil {
			rt.Fatal(err)
		}
		id := ib.IDs[0]
		// Each check leaves its intent finished, out of the next ones' queue.
		defer func() {
			if _, err := pool.Exec(ctx, `UPDATE outbox_intents SET state = 'failed', queued = false, claimed_attempt = NULL,
				finished_at = now() WHERE id = $1`, id); err != nil {
				rt.Fatal(err)
			}
		}()
		state := rapid.SampledFrom([]intenttype.State{intenttype.StatePending, intenttype.StatePending, intenttype.StateDispatching,
			intenttype.StateInDoubt, intenttype.StateWaiting, intenttype.StateFailed}).Draw(rt, "state")
		queued := (state == intenttype.StatePending || state == intenttype.StateDispatching) && rapid.Bool().Draw(rt, "queued")
		attempts := rapid.IntRange(0, 4).Draw(rt, "attempts")
		budgetFrom := rapid.IntRange(0, attempts).Draw(rt, "budget_from")
		var providerKey *string
		if rapid.Bool().Draw(rt, "key_fixed") {
			k := "fixed/" + key
			providerKey = &k
		}
		if _, err := pool.Exec(ctx, `
			UPDATE outbox_intents
			SET state = $2::text, attempt_count = $3::integer, budget_from = $4, may_have_acted = $5, provider_key = $6,
				key_generation = $7, claimed_attempt = CASE WHEN $2::text = 'dispatching' THEN $3::integer END,
				finished_at = CASE WHEN $2::text = 'failed' THEN now() END, queued = $8
			WHERE id = $1`, id, state, attempts, budgetFrom, rapid.Bool().Draw(rt, "may_have_acted"), providerKey,
			generation, queued); err != nil {
			rt.Fatal(err)
		}
		before, err := store.Load(ctx, id)
		if err != nil {
			rt.Fatal(err)
		}
		rule := rules.AttemptsAtOnce(before)
		if !queued {
			got, err := store.LoadClaim(ctx, id, rules, time.Now())
			if err != nil {
				rt.Fatal(err)
			}
			if (got.Claim != nil) != rule {
				rt.Fatalf("LoadClaim claimed: %v; AttemptsAtOnce: %v; row %+v, rules %+v", got.Claim != nil, rule, before, rules)
			}
			return
		}
		if got, err := store.LoadClaim(ctx, id, rules, time.Now()); err != nil || got.Claim != nil {
			rt.Fatalf("LoadClaim of a queued intent = %+v, %v; want no claim", got.Claim, err)
		}
		batch, err := store.ClaimQueued(ctx, rules, 1, time.Now())
		if err != nil {
			rt.Fatal(err)
		}
		after, err := store.Load(ctx, id)
		if err != nil {
			rt.Fatal(err)
		}
		_, served := rules.MaxKeyLength[provider]
		picked := state == intenttype.StatePending && served
		switch {
		case (len(batch.Claimed) == 1) != rule:
			rt.Fatalf("ClaimQueued claimed %d; AttemptsAtOnce: %v; row %+v, rules %+v", len(batch.Claimed), rule, before, rules)
		case picked && !rule && (after.Queued || batch.HandedOver != 1):
			rt.Fatalf("ClaimQueued left a queued intent the rule refuses %+v (handed over %d), want it given to River", after, batch.HandedOver)
		case !picked && (!after.Queued || batch.HandedOver != 0):
			rt.Fatalf("ClaimQueued took %+v (handed over %d), which it may not", after, batch.HandedOver)
		}
	})
}
