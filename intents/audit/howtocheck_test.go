package audit_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/outboxkit/outbox/intents/audit"
	"github.com/outboxkit/outbox/intents/intenttype"
)

func TestHowToCheck(t *testing.T) {
	in := intenttype.Intent{ID: 7, Provider: "stripe", ProviderKey: "ns1.2/billing:p1:it's", Namespace: "ns1", ProviderRef: "pi_123", AttemptCount: 1}
	c := audit.HowToCheck(in)
	wantSearch := `metadata['outbox_key']:'ns1.2/billing:p1:it\'s' AND metadata['outbox_namespace']:'ns1'`
	if c.Provider != "stripe" || c.Search != wantSearch {
		t.Errorf("stripe: %+v, want search %s", c, wantSearch)
	}
	if c.URL != "https://dashboard.stripe.com/search?query="+url.QueryEscape(wantSearch) {
		t.Errorf("stripe URL = %s", c.URL)
	}
	if c.ObjectURL != "https://dashboard.stripe.com/payments/pi_123" {
		t.Errorf("stripe object URL = %s", c.ObjectURL)
	}
	in.ProviderRef = ""
	if c := audit.HowToCheck(in); c.ObjectURL != "" {
		t.Errorf("object URL without a provider ref: %s", c.ObjectURL)
	}

	in = intenttype.Intent{ID: 8, Provider: "sendgrid", ProviderKey: "ns1.1/mailer:e2:", Namespace: "ns1", AttemptCount: 2}
	c = audit.HowToCheck(in)
	if c.URL != "https://app.sendgrid.com/email_activity" || c.Search != `unique_args['outbox_key']="ns1.1/mailer:e2:" AND unique_args['outbox_namespace']="ns1"` ||
		!strings.Contains(c.Note, "custom args") {
		t.Errorf("sendgrid: %+v", c)
	}

	in = intenttype.Intent{ID: 9, Provider: "webhook", ProviderKey: "k", Namespace: "ns"}
	if c = audit.HowToCheck(in); c.URL != "" || c.Search != "outbox_key=k outbox_namespace=ns" {
		t.Errorf("webhook: %+v", c)
	}

	// Before any provider key: the intent id the adapters also carry.
	in = intenttype.Intent{ID: 10, Provider: "stripe", AttemptCount: 1}
	if c = audit.HowToCheck(in); c.Search != "metadata['intent_id']:'10'" || !strings.Contains(c.Note, "no provider key") {
		t.Errorf("legacy stripe: %+v", c)
	}
}

// The advice (resolve, retry) is for an intent in_doubt only; and for
// SendGrid, a search that finds nothing is never advice to resend: the
// activity feed lags and may be empty without the add-on.
func TestHowToCheckAdvisesOnlyWhatIsInDoubt(t *testing.T) {
	for _, provider := range []string{"stripe", "sendgrid"} {
		in := intenttype.Intent{ID: 7, Provider: provider, ProviderKey: "ns1.0/billing:p1", Namespace: "ns1", AttemptCount: 1}
		in.State = intenttype.StateSucceeded
		if note := audit.HowToCheck(in).Note; strings.Contains(note, "resolve") || strings.Contains(note, "retry") {
			t.Errorf("%s, succeeded: note advises %q", provider, note)
		}
		in.State = intenttype.StateInDoubt
		note := audit.HowToCheck(in).Note
		if !strings.Contains(note, "resolve --as succeeded") {
			t.Errorf("%s, in_doubt: note %q gives no advice", provider, note)
		}
		if provider == "sendgrid" && (strings.Contains(note, "none: retry") || !strings.Contains(note, "None found proves nothing")) {
			t.Errorf("sendgrid, in_doubt: note %q advises a resend on nothing found", note)
		}
	}
}

// "May have acted" is advice only while the intent is unfinished, and says
// what the operator may do in that state: never "resolve" for a pending
// intent (only in_doubt ones are resolved), nothing once finished.
func TestMayHaveActedNoteOnlyWhereItApplies(t *testing.T) {
	for _, st := range intenttype.States {
		in := intenttype.Intent{ID: 7, State: st, MayHaveActed: true}
		note := audit.MayHaveActedNote(in)
		switch {
		case st.Terminal() && note != "":
			t.Errorf("%s: note %q, want none: the outcome is known", st, note)
		case st == intenttype.StateInDoubt && !strings.Contains(note, "check there before you resolve or resend"):
			t.Errorf("in_doubt: note %q", note)
		case (st == intenttype.StatePending || st == intenttype.StateDispatching) && (!strings.Contains(note, "cannot be cancelled") || strings.Contains(note, "resolve")):
			t.Errorf("%s: note %q, want that it cannot be cancelled, and no resolve", st, note)
		}
		in.MayHaveActed = false
		if note := audit.MayHaveActedNote(in); note != "" {
			t.Errorf("%s, no attempt may have acted: note %q", st, note)
		}
	}
}
