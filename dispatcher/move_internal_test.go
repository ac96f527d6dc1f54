package dispatcher

import (
	"strconv"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/internal/intentstore"
	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
	"github.com/outboxkit/outbox/providers/stripeprovider"
)

// An intent the claim rules let LoadClaim claim as it loads it is one the
// worker's decision would attempt at once: the rules in the statement
// (which TestLoadClaimAgreesWithAttemptsAtOnce holds to
// intentstore.ClaimRules.AttemptsAtOnce) never claim an intent the worker
// would settle instead (out of budget, or past its key window after an
// attempt that may have acted).
func TestAttemptsAtOnceIsAnAttempt(t *testing.T) {
	sp, err := stripeprovider.New(stripeprovider.Config{APIKey: "sk_test_move", BaseURL: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	gp, err := sendgridprovider.New(sendgridprovider.Config{APIKey: "SG.move", BaseURL: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := providers.NewRegistry(sp, gp)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	held := 0
	rapid.Check(t, func(rt *rapid.T) {
		cfg := &Config{Providers: reg, MaxAttempts: rapid.IntRange(1, 4).Draw(rt, "max_attempts"),
			KeyWindowMargin: time.Duration(rapid.IntRange(0, 3).Draw(rt, "margin_h")) * time.Hour}
		kind := rapid.SampledFrom([]string{stripeprovider.KindPaymentIntent, stripeprovider.KindPaymentIntent, sendgridprovider.KindEmail}).Draw(rt, "kind")
		if rapid.Bool().Draw(rt, "kind_bound") {
			cfg.MaxAttemptsByKind = map[string]int{kind: rapid.IntRange(0, 4).Draw(rt, "kind_max_attempts")}
		}
		d := &Dispatcher{config: cfg}
		p, err := reg.ForKind(kind)
		if err != nil {
			rt.Fatal(err)
		}
		attempts := rapid.IntRange(0, 5).Draw(rt, "attempts")
		row := intentstore.Row{
			ID: 1, Key: "k:" + strconv.Itoa(attempts), Kind: kind, Provider: p.Name(),
			State:        rapid.SampledFrom([]intenttype.State{intenttype.StatePending, intenttype.StateDispatching}).Draw(rt, "state"),
			AttemptCount: attempts, BudgetFrom: rapid.IntRange(0, attempts).Draw(rt, "budget_from"),
			MayHaveActed:  rapid.Bool().Draw(rt, "may_have_acted"),
			KeyGeneration: rapid.IntRange(0, 3).Draw(rt, "generation"),
		}
		if row.MayHaveActed || rapid.Bool().Draw(rt, "key_used") {
			row.ProviderKey = "ns.0/" + row.Key
			// Inside and past the providers' key windows (Stripe's 24 h).
			row.KeyFirstUsedAt = now.Add(-time.Duration(rapid.SampledFrom([]int{0, 20, 23, 25, 48}).Draw(rt, "key_age_h")) * time.Hour)
		}
		if d.claimRules("ns").AttemptsAtOnce(row) {
			held++
			if m := d.nextMove(row, p.Capabilities(), now); m != moveAttempt {
				rt.Fatalf("the claim rules claim %+v, which the worker would not attempt (move %d)", row, m)
			}
		}
	})
	if held == 0 {
		t.Fatal("no drawn row was one the rules claim: the property was never tested")
	}
}
