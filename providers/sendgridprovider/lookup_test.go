package sendgridprovider_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/fault"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
	"github.com/outboxkit/outbox/providers/sendgridprovider/sendgriddouble"
)

// A refused Email Activity look-up says nothing about the email (DESIGN.md,
// invariant 12): every answer but a 200 is a *providers.LookupError, never
// an *AttemptError a dispatcher could read as "did not happen", and it
// names what the look-up needs.
func TestRefusedLookUpsProveNothing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		fault   fault.Fault
		refused bool
		needs   string
		wait    bool
	}{
		{"400 without the add-on", fault.Fault{Kind: fault.ErrorBefore, Status: http.StatusBadRequest}, true, "Email Activity History add-on", false},
		{"401 invalid key", fault.Fault{Kind: fault.ErrorBefore, Status: http.StatusUnauthorized}, true, "valid SendGrid API key", false},
		{"403 key without the scope", fault.Fault{Kind: fault.ErrorBefore, Status: http.StatusForbidden}, true, "email_activity.read", false},
		{"404", fault.Fault{Kind: fault.ErrorBefore, Status: http.StatusNotFound}, true, "resource not found", false},
		{"500", fault.Fault{Kind: fault.ErrorBefore, Status: http.StatusInternalServerError}, false, "", false},
		{"429", fault.Fault{Kind: fault.RateLimit, RetryAfter: 40 * time.Second}, false, "", true},
		{"503", fault.Fault{Kind: fault.ErrorBefore, Status: http.StatusServiceUnavailable}, false, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := startDouble(t, sendgriddouble.Config{})
			p := newProvider(t, sendgridprovider.Config{BaseURL: s.URL(), Reconcile: true})
			req := nsRequest("ns-a", 1, welcome)
			if _, ae := perform(t, p, req); ae != nil {
				t.Fatal(ae)
			}
			s.LookupFaults().Push(tc.fault)
			_, found, err := p.Reconcile(context.Background(), req)
			var le *providers.LookupError
			var ae *providers.AttemptError
			if found || !errors.As(err, &le) || errors.As(err, &ae) {
				t.Fatalf("Reconcile = %v, %T %v; want a *providers.LookupError and no *AttemptError", found, err, err)
			}
			if le.Refused() != tc.refused || !strings.Contains(le.Error(), tc.needs) || (le.RetryAfter > 0) != tc.wait {
				t.Fatalf("LookupError %+v: refused %v, want %v; says %q, want it to name %q; RetryAfter %s", le, le.Refused(), tc.refused, le.Error(), tc.needs, le.RetryAfter)
			}
			if tc.wait && (le.RetryAfter < 30*time.Second || le.RetryAfter > 41*time.Second) {
				t.Fatalf("RetryAfter %s, want the double's reset about 40 s ahead", le.RetryAfter)
			}
			// The same look-up, unrefused, finds the email.
			if _, found, err := p.Reconcile(context.Background(), req); !found || err != nil {
				t.Fatalf("Reconcile after the fault = %v, %v", found, err)
			}
		})
	}
}

// The adapter paces look-ups to SendGrid's 6 a minute (PROVIDERS.md): the
// seventh within a minute is not sent, and says when the next may go.
func TestLookUpsArePacedToSendGridsLimit(t *testing.T) {
	t.Parallel()
	now := fixedNow
	clock := func() time.Time { return now }
	s := startDouble(t, sendgriddouble.Config{Now: clock})
	p := newProvider(t, sendgridprovider.Config{BaseURL: s.URL(), Reconcile: true, Now: clock})
	req := nsRequest("ns-a", 1, welcome)
	if _, ae := perform(t, p, req); ae != nil {
		t.Fatal(ae)
	}
	before := s.Stats().ActivityRequests
	for i := range sendgridprovider.DefaultActivityRequestsPerMinute {
		if _, found, err := p.Reconcile(context.Background(), req); !found || err != nil {
			t.Fatalf("look-up %d = %v, %v", i+1, found, err)
		}
		now = now.Add(time.Second)
	}
	_, found, err := p.Reconcile(context.Background(), req)
	var le *providers.LookupError
	if found || !errors.As(err, &le) || le.RetryAfter != time.Minute-6*time.Second || le.HTTPStatus != 0 {
		t.Fatalf("seventh look-up within a minute = %v, %v; want paced for 54s", found, err)
	}
	if sent := s.Stats().ActivityRequests - before; sent != sendgridprovider.DefaultActivityRequestsPerMinute {
		t.Fatalf("the double saw %d look-ups, want %d", sent, sendgridprovider.DefaultActivityRequestsPerMinute)
	}
	now = now.Add(le.RetryAfter)
	if _, found, err := p.Reconcile(context.Background(), req); !found || err != nil {
		t.Fatalf("look-up once the minute passed = %v, %v", found, err)
	}
}
