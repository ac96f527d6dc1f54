package adminhttp_test

import (
	"fmt"
	"testing"
)

// A refund recorded through the API after its charge: the API's detail and
// the dashboard's page say what it waits for and what it comes after.
func TestOrderedIntentThroughTheAPIAndTheDashboard(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{token: testToken})
	refund := `{"kind": "stripe.refund", "name": "refund", "ordering_key": "cus_1", "payload": {"amount": 100},` +
		` "after": [{"name": "charge", "fill": {"payment_intent": "provider_ref"}}]}`
	ids := b.record(t, message("m-1", "billing", payment("charge", "order-1"), refund))
	charge, rf := ids[0], ids[1]

	r := b.do(t, req{path: fmt.Sprintf("/api/v1/intents/%d", rf)})
	wantContains(t, "API detail", r.body, `"state": "waiting"`, `"ordering_key": "cus_1"`,
		fmt.Sprintf(`"after_id": %d`, charge), `"after_key": "billing:m-1:charge"`, `"after_state": "pending"`, `"payment_intent": "provider_ref"`,
		fmt.Sprintf("recorded; waits for intent %d (billing:m-1:charge) to succeed", charge))

	r = b.do(t, req{path: fmt.Sprintf("/intents/%d", rf)})
	wantContains(t, "dashboard detail", r.body, "Comes after", fmt.Sprintf(`<a href="/intents/%d">intent %d</a>`, charge, charge),
		"fills payment_intent from its provider_ref", "Ordering key", "<code>cus_1</code>", "waiting")
}
