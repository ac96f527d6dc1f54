package stripeprovider_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/fault"
	"github.com/outboxkit/outbox/providers/stripeprovider"
)

// A refused or failed look-up says nothing about the charge, refund,
// capture or cancel it looks for (DESIGN.md, invariant 12): Reconcile
// answers a *providers.LookupError naming what the look-up needs, never an
// *AttemptError a dispatcher could read as "did not happen". Each kind's
// look-up (a list, a retrieve) meets every refusal after a real effect.
func TestRefusedLookUpsProveNothing(t *testing.T) {
	answers := []struct {
		name    string
		fault   fault.Fault
		refused bool
		needs   string
		wait    time.Duration
	}{
		{"400 resource_missing", fault.Fault{Kind: fault.ErrorBefore, Status: http.StatusBadRequest}, true, "account and mode", 0},
		{"404 another account or mode", fault.Fault{Kind: fault.ErrorBefore, Status: http.StatusNotFound}, true, "account and mode", 0},
		{"401", fault.Fault{Kind: fault.ErrorBefore, Status: http.StatusUnauthorized}, true, "valid Stripe secret key", 0},
		{"403 restricted key", fault.Fault{Kind: fault.ErrorBefore, Status: http.StatusForbidden}, true, "allowed to read", 0},
		{"429 with Retry-After", fault.Fault{Kind: fault.RateLimit, RetryAfter: 7 * time.Second}, false, "rate limit", 7 * time.Second},
		{"429 Stripe-Should-Retry false", fault.Fault{Kind: fault.RateLimit}, false, "rate limit", 0},
		{"500", fault.Fault{Kind: fault.ErrorBefore, Status: http.StatusInternalServerError}, false, "", 0},
	}
	d, p := setup(t)
	ctx := context.Background()
	pi := charge(t, p, 1, "2000", true)
	kinds := []struct {
		name string
		req  func(i int) providers.Request
	}{
		{"charge", func(i int) providers.Request {
			r := moneyReq(int64(100+i), stripeprovider.KindPaymentIntent, "lookup-charge-"+string(rune('a'+i)), `{"amount": 700, "currency": "usd", "payment_method": "pm_card_visa", "confirm": true}`)
			if _, err := p.Perform(ctx, r); err != nil {
				t.Fatal(err)
			}
			return r
		}},
		{"refund", func(i int) providers.Request {
			r := moneyReq(int64(200+i), stripeprovider.KindRefund, "lookup-refund-"+string(rune('a'+i)), `{"payment_intent": "`+pi+`", "amount": 1}`)
			return r // not performed: the look-up is refused before it could tell
		}},
		{"capture", func(i int) providers.Request {
			return moneyReq(int64(300+i), stripeprovider.KindCapture, "lookup-capture-"+string(rune('a'+i)), `{"payment_intent": "`+pi+`"}`)
		}},
	}
	for _, k := range kinds {
		for i, a := range answers {
			r := k.req(i)
			d.LookupFaults().Push(a.fault)
			_, found, err := p.Reconcile(ctx, r)
			var le *providers.LookupError
			var ae *providers.AttemptError
			var np *providers.NotPerformedError
			if found || !errors.As(err, &le) || errors.As(err, &ae) || errors.As(err, &np) {
				t.Fatalf("%s, look-up answered %s: Reconcile = %v, %T %v; want only a *providers.LookupError", k.name, a.name, found, err, err)
			}
			if le.Refused() != a.refused || !strings.Contains(le.Needs, a.needs) || le.RetryAfter != a.wait {
				t.Fatalf("%s, look-up answered %s: %+v (refused %v, want %v; needs %q, want %q; RetryAfter %s, want %s)",
					k.name, a.name, le, le.Refused(), a.refused, le.Needs, a.needs, le.RetryAfter, a.wait)
			}
			if strings.Contains(le.Error(), secretKey) {
				t.Fatalf("the key leaked: %v", le)
			}
		}
	}
}
