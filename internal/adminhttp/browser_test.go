package adminhttp_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outboxkit/outbox/intents/intenttype"
)

// TestDashboardInABrowser drives the dashboard in headless Chromium the way
// an operator would: sign in with the token, filter the list to in_doubt,
// open an intent, resolve it through the confirmation form, and check the
// database. It saves a screenshot of the list in the test's temporary
// directory, or as docs/dashboard.png when UPDATE_SCREENSHOT=1 (so a normal
// run does not rewrite a tracked file).
func TestDashboardInABrowser(t *testing.T) {
	t.Parallel()
	br := startBrowser(t)
	b := setup(t, setupOpts{token: testToken})

	// A morning's worth of orders in every state.
	var inDoubt []int64
	for i := 1; i <= 6; i++ {
		order := fmt.Sprintf("order-%d", 1040+i)
		ids := b.record(t, message(order, "billing", payment("payment", order), email("receipt", order)))
		switch i {
		case 1, 2, 4:
			b.setState(t, ids[0], intenttype.StateSucceeded)
			b.setState(t, ids[1], intenttype.StateSucceeded)
		case 3:
			b.setState(t, ids[0], intenttype.StateFailed)
		case 5:
			b.setState(t, ids[0], intenttype.StateSucceeded)
			b.setState(t, ids[1], intenttype.StateInDoubt)
			inDoubt = append(inDoubt, ids[1])
		case 6:
			b.setState(t, ids[1], intenttype.StateInDoubt)
			inDoubt = append(inDoubt, ids[1])
		}
	}
	target := inDoubt[0]

	// Sign in: the dashboard sends the browser to the login form.
	br.navigate(b.url + "/")
	if loc := br.location(); !strings.HasPrefix(loc, "/login") {
		t.Fatalf("unauthenticated browser is at %s, want /login", loc)
	}
	br.act(fmt.Sprintf(`document.querySelector('input[name=token]').value = %q; document.querySelector('form[action="/login"]').submit()`, testToken))
	if loc := br.location(); loc != "/" {
		t.Fatalf("after sign-in the browser is at %s, want /", loc)
	}
	if got := br.text(".count-in_doubt .n"); got != "2" {
		t.Errorf("in_doubt count on the list = %q, want 2", got)
	}

	// Filter to in_doubt with the form.
	br.act(`document.querySelector('input[name=state][value=in_doubt]').checked = true; document.querySelector('form.filters').submit()`)
	if loc := br.location(); loc != "/?state=in_doubt" {
		t.Errorf("filtered list is at %s", loc)
	}
	var rows []string
	br.eval(`Array.from(document.querySelectorAll('table.intents tbody tr')).map(r => r.innerText)`, &rows)
	if len(rows) != 2 || !strings.Contains(strings.Join(rows, "\n"), "in_doubt") || strings.Contains(strings.Join(rows, "\n"), "succeeded") {
		t.Errorf("filtered rows = %q, want the two in_doubt intents", rows)
	}

	// Open the intent's detail page from the list.
	br.act(fmt.Sprintf(`document.querySelector('table.intents a[href="/intents/%d"]').click()`, target))
	if got := br.text("h1"); !strings.Contains(got, fmt.Sprintf("Intent %d", target)) || !strings.Contains(got, "in_doubt") {
		t.Errorf("detail heading = %q", got)
	}
	payload := br.text("pre.payload")
	if !strings.Contains(payload, "Receipt") || strings.Contains(payload, recipientEmail) {
		t.Errorf("detail payload is not the redacted payload:\n%s", payload)
	}
	if got := br.text("ol.timeline"); !strings.Contains(got, "ambiguous") {
		t.Errorf("attempts timeline = %q, want the ambiguous attempt", got)
	}
	if got := br.text("table.events"); !strings.Contains(got, "dispatcher") {
		t.Errorf("event log = %q, want the dispatcher's event", got)
	}

	// Resolve it through the confirmation page.
	br.act(`document.querySelector('a.action-resolve').click()`)
	if loc := br.location(); loc != fmt.Sprintf("/intents/%d/resolve", target) {
		t.Fatalf("confirmation page is at %s", loc)
	}
	br.act(`document.querySelector('input[name=as][value=succeeded]').checked = true;
		document.querySelector('textarea[name=reason]').value = 'Delivered: the SendGrid activity feed shows it';
		document.querySelector('input[name=actor]').value = 'alice';
		document.querySelector('input[name=confirmed]').checked = true;
		document.querySelector('form.confirm button[type=submit]').click()`)
	if loc := br.location(); loc != fmt.Sprintf("/intents/%d?done=resolve", target) {
		t.Fatalf("after resolving the browser is at %s (%s)", loc, br.text("main"))
	}
	if got := br.text("#done"); !strings.Contains(got, "Resolve") {
		t.Errorf("no confirmation notice after resolving; page: %s", br.text("main"))
	}
	if got := b.intentState(t, target); got != intenttype.StateSucceeded {
		t.Errorf("intent %d is %s after resolving in the browser, want succeeded", target, got)
	}
	var actor, reason string
	if err := b.pool.QueryRow(context.Background(), `SELECT actor, reason FROM outbox_events WHERE intent_id = $1 ORDER BY id DESC LIMIT 1`, target).Scan(&actor, &reason); err != nil {
		t.Fatal(err)
	}
	if actor != "operator:dashboard:alice" || !strings.Contains(reason, "activity feed") {
		t.Errorf("resolve event: actor %q reason %q", actor, reason)
	}

	// The list, for the README.
	br.navigate(b.url + "/")
	if got := br.text(".count-in_doubt .n"); got != "1" {
		t.Errorf("in_doubt count after resolving = %q, want 1", got)
	}
	shot := filepath.Join(t.TempDir(), "dashboard.png")
	if os.Getenv("UPDATE_SCREENSHOT") == "1" {
		shot = filepath.Join("..", "..", "docs", "dashboard.png")
	}
	br.screenshot(shot)
}
