package sendgridprovider_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
	"github.com/outboxkit/outbox/providers/sendgridprovider/sendgriddouble"
)

// email builds a payload from a valid one with extra fields.
func email(extra string) string {
	return `{"from":{"email":"shop@example.com"},"to":[{"email":"a@example.com","name":"Ann"}],"subject":"s","text":"t"` + extra + `}`
}

func TestValidateRefusesWhatSendGridRefuses(t *testing.T) {
	t.Parallel()
	d := startDouble(t, sendgriddouble.Config{})
	p := newProvider(t, sendgridprovider.Config{BaseURL: d.URL(), Now: func() time.Time { return fixedNow }})
	latest := fixedNow.Add(sendgridprovider.MaxSendAtAhead).Unix()
	eleven := `"c0","c1","c2","c3","c4","c5","c6","c7","c8","c9","c10"`
	bigArgs, _ := json.Marshal(map[string]string{"big": strings.Repeat("x", 10001)})
	refused := map[string]string{
		email(fmt.Sprintf(`,"send_at":%d`, latest+1)):                  "send_at",
		email(`,"categories":["receipts","receipts"]`):                 "categories[1]",
		email(`,"categories":["café"]`):                                "categories[0]",
		email(`,"categories":["tab\there"]`):                           "categories[0]",
		email(`,"categories":[` + eleven + `]`):                        "categories",
		email(`,"cc":[{"email":"A@example.com"}]`):                     "cc[0].email",
		email(`,"custom_args":` + string(bigArgs)):                     "custom_args",
		email(`,"bcc":[{"email":"b@example.com","name":"Doe, Jane"}]`): "bcc[0].name",
		`{"from":{"email":"shop@example.com"},"to":[{"email":"a@example.com","name":"Ann; Bob"}],"subject":"s","text":"t"}`: "to[0].name",
	}
	for payload, field := range refused {
		err := p.Validate(sendgridprovider.KindEmail, json.RawMessage(payload))
		var pe *providers.PayloadError
		if !errors.As(err, &pe) || pe.Field != field || pe.Reason == "" {
			t.Errorf("Validate(%.90s) = %v, want a PayloadError naming %q", payload, err, field)
		}
		// Perform refuses it too, without sending.
		if _, ae := perform(t, p, request(1, payload)); ae == nil || ae.Outcome != providers.OutcomeFailed || !ae.DidNotAct || ae.HTTPStatus != 0 {
			t.Errorf("Perform(%.90s) = %v", payload, ae)
		}
	}
	if st := d.Stats(); st.Requests != 0 || st.Emails != 0 {
		t.Fatalf("refused payloads reached the double: %+v", st)
	}
	for _, payload := range []string{
		email(fmt.Sprintf(`,"send_at":%d`, latest)),
		email(`,"categories":["c0","c1","c2","c3","c4","c5","c6","c7","c8","c9"]`),
		email(`,"categories":["Receipts","receipts"]`),
		`{"from":{"email":"shop@example.com","name":"Shop, Inc."},"to":[{"email":"a@example.com","name":"Ann O'Neil"}],"subject":"s","text":"t"}`,
	} {
		if err := p.Validate(sendgridprovider.KindEmail, json.RawMessage(payload)); err != nil {
			t.Errorf("Validate(%.90s) = %v", payload, err)
		}
	}
	// send_at is measured on Config.Now: the same payload is refused by a
	// provider whose clock is a minute earlier.
	early := newProvider(t, sendgridprovider.Config{Now: func() time.Time { return fixedNow.Add(-time.Minute) }})
	if err := early.Validate(sendgridprovider.KindEmail, json.RawMessage(email(fmt.Sprintf(`,"send_at":%d`, latest)))); err == nil {
		t.Fatal("send_at 72h01m ahead was accepted")
	}
}

func TestMisconfiguredAccountHoldsTheQueue(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode   sendgriddouble.AuthFailure
		status int
		says   string
	}{
		{sendgriddouble.AuthKeyRevoked, http.StatusUnauthorized, "invalid, expired, or revoked"},
		{sendgriddouble.AuthCreditsExceeded, http.StatusUnauthorized, "Maximum credits exceeded"},
		{sendgriddouble.AuthMissingScope, http.StatusForbidden, "access forbidden"},
		{sendgriddouble.AuthTemporarilyBlocked, http.StatusForbidden, "temporarily blocked"},
	} {
		d := startDouble(t, sendgriddouble.Config{})
		p := newProvider(t, sendgridprovider.Config{BaseURL: d.URL()})
		d.SetAuthFailure(tc.mode)
		_, ae := perform(t, p, request(1, email("")))
		if ae == nil || ae.Outcome != providers.OutcomeRetry || ae.HTTPStatus != tc.status || !ae.DidNotAct ||
			ae.Code != sendgridprovider.CodeProviderAuth || !strings.Contains(ae.Message, "fix the SendGrid credentials") || !strings.Contains(ae.Message, tc.says) {
			t.Fatalf("mode %d: %+v", tc.mode, ae)
		}
		if n := len(d.Emails()); n != 0 {
			t.Fatalf("mode %d: %d emails sent", tc.mode, n)
		}
		d.SetAuthFailure(sendgriddouble.AuthOK)
		if _, ae := perform(t, p, request(1, email(""))); ae != nil {
			t.Fatalf("mode %d: after the fix: %v", tc.mode, ae)
		}
		if d.EffectsFor(1) != 1 {
			t.Fatalf("mode %d: %d emails", tc.mode, d.EffectsFor(1))
		}
	}
	// An unverified sender is this email's problem, not the account's: it
	// fails.
	d := startDouble(t, sendgriddouble.Config{})
	p := newProvider(t, sendgridprovider.Config{BaseURL: d.URL()})
	_, ae := perform(t, p, request(1, `{"from":{"email":"`+sendgriddouble.UnverifiedSender+`"},"to":[{"email":"a@example.com"}],"subject":"s","text":"t"}`))
	if ae == nil || ae.Outcome != providers.OutcomeFailed || ae.HTTPStatus != http.StatusForbidden || ae.Code == sendgridprovider.CodeProviderAuth {
		t.Fatalf("unverified sender: %+v", ae)
	}
}
