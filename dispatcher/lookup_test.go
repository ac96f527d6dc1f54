package dispatcher_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/providers/fault"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
	"github.com/outboxkit/outbox/providers/stripeprovider"
)

// lookupAnswers are the look-up answers that prove nothing (DESIGN.md,
// invariant 12), with what the intent's note must then say.
var lookupAnswers = []struct {
	name  string
	fault fault.Fault
	says  string
}{
	{"400", fault.Fault{Kind: fault.ErrorBefore, Status: http.StatusBadRequest}, "look-up refused (HTTP 400)"},
	{"401", fault.Fault{Kind: fault.ErrorBefore, Status: http.StatusUnauthorized}, "look-up refused (HTTP 401)"},
	{"403", fault.Fault{Kind: fault.ErrorBefore, Status: http.StatusForbidden}, "look-up refused (HTTP 403)"},
	{"404", fault.Fault{Kind: fault.ErrorBefore, Status: http.StatusNotFound}, "look-up refused (HTTP 404)"},
	{"429", fault.Fault{Kind: fault.RateLimit, RetryAfter: 90 * time.Second}, "look-up failed (HTTP 429)"},
	{"500", fault.Fault{Kind: fault.ErrorBefore, Status: http.StatusInternalServerError}, "look-up failed (HTTP 500)"},
}

// A charge or an email that happened, whose answer was lost to a 500 after
// acting, is never settled failed because the look-up that followed was
// refused: it stays in_doubt with a note naming what the look-up needs,
// and the next look-up that answers finds it. (Against a Stripe whose list
// answered 404, 84 of 1,500 charges made ended failed before.)
func TestARefusedLookUpNeverFailsAnEffectThatHappened(t *testing.T) {
	t.Parallel()
	for _, a := range lookupAnswers {
		for _, kind := range []string{stripeprovider.KindPaymentIntent, sendgridprovider.KindEmail} {
			t.Run(kind+"/"+a.name, func(t *testing.T) {
				t.Parallel()
				b := setup(t, options{sendgridReconcile: true})
				payload, effects, lookups := paymentPayload, b.stripe.EffectsFor, b.stripe.LookupFaults()
				b.stripe.Faults().Push(fault.Fault{Kind: fault.ErrorAfter, Status: 500})
				if kind == sendgridprovider.KindEmail {
					payload, effects, lookups = emailPayload, b.sendgrid.EffectsFor, b.sendgrid.LookupFaults()
					b.sendgrid.Faults().Push(fault.Fault{Kind: fault.ErrorAfter, Status: 500})
				}
				lookups.Push(a.fault)
				id := b.record(t, kind, payload)
				d := b.start(t, b.config())

				s := b.waitSettled(t, id)
				if s.State != intenttype.StateInDoubt || !strings.Contains(s.LastError, a.says) {
					t.Fatalf("after the refused look-up: %+v, want in_doubt saying %q", s, a.says)
				}
				if n := effects(id); n != 1 {
					t.Fatalf("the double performed it %d times, want 1", n)
				}
				var rechecks int
				var recheckAt time.Time
				if err := b.pool.QueryRow(context.Background(), `SELECT recheck_count, recheck_at FROM outbox_intents WHERE id = $1`, id).Scan(&rechecks, &recheckAt); err != nil {
					t.Fatal(err)
				}
				if a.fault.Kind == fault.RateLimit {
					// Asked to wait: the wait is the provider's, and it
					// spends none of the intent's re-checks.
					if ahead := recheckAt.Sub(b.clock.Now()); rechecks != 0 || ahead < 60*time.Second || ahead > 91*time.Second {
						t.Fatalf("rate limited look-up: recheck %d at %s ahead, want 0 spent and the provider's 90s", rechecks, ahead)
					}
				}

				// The look-up that answers finds it.
				b.clock.Advance(3 * time.Hour)
				if _, err := d.Recheck(context.Background()); err != nil {
					t.Fatal(err)
				}
				if s := b.intent(t, id); s.State != intenttype.StateSucceeded || s.ProviderRef == "" {
					t.Fatalf("after a look-up that answered: %+v, want succeeded", s)
				}
				if n := effects(id); n != 1 {
					t.Fatalf("the double performed it %d times, want 1", n)
				}
			})
		}
	}
}
