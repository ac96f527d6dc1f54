package adminhttp_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox/intents/intenttype"
)

// TestDashboardInABrowser drives the dashboard in headless Chromium the way
// an operator would: sign in with the token, read the activity chart and
// the intents' ages, pause auto-refresh, filter the list to in_doubt emails
// with the kind choice, open an intent, follow its reference to every
// intent of the order, resolve one through the confirmation form, and
// check the database. It saves a screenshot of the list in the test's temporary
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
	// The orders came in a few minutes ago, by the server's clock.
	b.clock.Advance(4*time.Minute + 30*time.Second)

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
	if got := tileColor(br, "failed"); got != tileAlarm["failed"] {
		t.Errorf("1 failed is drawn in %s, want the alarm colour %s", got, tileAlarm["failed"])
	}

	// The chart: twelve intents recorded, seven succeeded, two in doubt,
	// two waiting, drawn as one line each over the last hour.
	var chart struct {
		Lines  []string
		Totals []string
		Width  float64
	}
	br.eval(`({
		lines: Array.from(document.querySelectorAll('svg.activity polyline.series')).map(p => p.getAttribute('class') + ' ' + p.points.numberOfItems),
		totals: Array.from(document.querySelectorAll('.legend li')).map(li => li.innerText),
		width: document.querySelector('svg.activity').getBoundingClientRect().width,
	})`, &chart)
	if want := []string{"series series-recorded 60", "series series-succeeded 60", "series series-in_doubt 60", "series series-backlog 60"}; strings.Join(chart.Lines, "|") != strings.Join(want, "|") {
		t.Errorf("chart lines = %q, want %q", chart.Lines, want)
	}
	if got, want := strings.Join(chart.Totals, "|"), "recorded 12|succeeded 7|in_doubt 2|backlog 2 now"; got != want || chart.Width < 300 {
		t.Errorf("chart legend = %q (width %.0f), want %q", got, chart.Width, want)
	}
	// Ages are relative, with the exact time on hover.
	var age struct{ Text, Title string }
	br.eval(`(t => ({text: t.innerText, title: t.title}))(document.querySelector('table.intents td.age time'))`, &age)
	if age.Text != "4 min ago" || !regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$`).MatchString(age.Title) {
		t.Errorf("age = %q with title %q, want 4 min ago and the UTC time", age.Text, age.Title)
	}

	// The list reloads itself until paused.
	if n := br.count(`meta[http-equiv=refresh]`); n != 1 {
		t.Errorf("%d meta refresh elements on the list, want 1", n)
	}
	br.act(`document.querySelector('#refresh-toggle').click()`)
	if loc := br.location(); loc != "/?refresh=off" || br.count(`meta[http-equiv=refresh]`) != 0 || !strings.Contains(br.text("#refresh"), "paused") {
		t.Errorf("after pausing the browser is at %s with %q", loc, br.text("#refresh"))
	}

	// Filter to in_doubt emails with the form: the kind is a choice.
	var kinds []string
	br.eval(`Array.from(document.querySelectorAll('select[name=kind] option')).map(o => o.value)`, &kinds)
	// "any kind", then every kind the registered providers perform.
	if len(kinds) < 3 || kinds[0] != "" || !slices.Contains(kinds, "sendgrid.email") || !slices.Contains(kinds, "stripe.payment_intent") || !slices.IsSorted(kinds[1:]) {
		t.Errorf("kind choices = %q, want any kind then the registered kinds in order", kinds)
	}
	br.act(`document.querySelector('select[name=kind]').value = 'sendgrid.email';
		document.querySelector('input[name=state][value=in_doubt]').checked = true;
		document.querySelector('form.filters').submit()`)
	if loc := br.location(); loc != "/?kind=sendgrid.email&refresh=off&state=in_doubt" {
		t.Errorf("filtered list is at %s", loc)
	}
	if br.count(`meta[http-equiv=refresh]`) != 0 {
		t.Errorf("the filtered list reloads itself although paused")
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

	// Its reference leads to every intent of the order: the charge, then
	// the receipt.
	br.act(`document.querySelector('dl.facts a.ref').click()`)
	if loc := br.location(); loc != "/references/order-1045" {
		t.Fatalf("reference page is at %s", loc)
	}
	var refRows []string
	br.eval(`Array.from(document.querySelectorAll('table.reference tbody tr')).map(r => r.innerText.replace(/\s+/g, ' ').trim())`, &refRows)
	if len(refRows) != 2 || !strings.Contains(refRows[0], "stripe.payment_intent") || !strings.Contains(refRows[0], "succeeded") ||
		!strings.Contains(refRows[1], "sendgrid.email") || !strings.Contains(refRows[1], "in_doubt") || !strings.Contains(refRows[1], "4 min ago") {
		t.Errorf("reference rows = %q", refRows)
	}
	br.act(fmt.Sprintf(`document.querySelector('table.reference a[href="/intents/%d"]').click()`, target))
	if loc := br.location(); loc != fmt.Sprintf("/intents/%d", target) {
		t.Fatalf("back on the detail page at %s", loc)
	}

	// Resolve it through the confirmation page.
	br.act(`document.querySelector('a.action-resolve').click()`)
	if loc := br.location(); loc != fmt.Sprintf("/intents/%d/resolve", target) {
		t.Fatalf("confirmation page is at %s", loc)
	}
	if br.count(`meta[http-equiv=refresh]`) != 0 {
		t.Errorf("the confirmation form would reload itself")
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
	if err := b.pool.QueryRow(context.Background(), `SELECT actor, reason FROM outbox_intent_events WHERE intent_id = $1 ORDER BY at DESC, id DESC NULLS LAST LIMIT 1`, target).Scan(&actor, &reason); err != nil {
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
		shot = filepath.Join("..", "docs", "dashboard.png")
	}
	br.screenshot(shot)
}
