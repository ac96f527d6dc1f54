package adminhttp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox/dispatcher"
	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
	"github.com/outboxkit/outbox/providers/sendgridprovider/sendgriddouble"
)

// startSendGrid starts the SendGrid double and a dispatcher that performs
// emails against it, both stopped when the test ends: an operator's resend
// then sends a real request, and the double counts what arrived.
func startSendGrid(t *testing.T, b *testBundle) *sendgriddouble.Server {
	t.Helper()
	double, err := sendgriddouble.NewServer(sendgriddouble.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = double.Close() })
	adapter, err := sendgridprovider.New(sendgridprovider.Config{APIKey: sendgriddouble.DefaultAPIKey, BaseURL: double.URL()})
	if err != nil {
		t.Fatal(err)
	}
	registry, err := providers.NewRegistry(adapter)
	if err != nil {
		t.Fatal(err)
	}
	d, err := dispatcher.New(b.pool, &dispatcher.Config{Providers: registry, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := d.Stop(ctx); err != nil {
			t.Errorf("stop the dispatcher: %v", err)
		}
	})
	return double
}

// TestInDoubtWorkflowInABrowser drives an operator's worst hour in headless
// Chromium: SendGrid answered 502 to four emails, which are in_doubt. The
// operator reveals one email's recipient to look it up (the page shows it,
// the event log says who looked and why, the next view is redacted again),
// then resends the three of the billing consumer in bulk: a preview lists
// them, the confirmation resends them, the dispatcher sends each once to
// the SendGrid double, and the list shows them succeeded while the
// newsletter's email stays in_doubt. The same form posted a second time
// sends nothing more.
func TestInDoubtWorkflowInABrowser(t *testing.T) {
	t.Parallel()
	br := startBrowser(t)
	b := setup(t, setupOpts{token: testToken})
	var billing []int64
	for i := 1; i <= 3; i++ {
		billing = append(billing, b.record(t, message(fmt.Sprintf("m-%d", i), "billing", email("receipt", fmt.Sprintf("order-%d", i))))[0])
	}
	newsletter := b.record(t, message("n-1", "newsletter", email("issue", "issue-12")))[0]
	for _, id := range append(append([]int64{}, billing...), newsletter) {
		b.setState(t, id, intenttype.StateInDoubt)
	}
	double := startSendGrid(t, b)

	br.navigate(b.url + "/login")
	br.act(fmt.Sprintf(`document.querySelector('input[name=token]').value = %q; document.querySelector('form[action="/login"]').submit()`, testToken))

	revealInTheBrowser(t, br, b, newsletter)

	// Resend the billing emails in bulk, from the filtered list.
	br.navigate(b.url + "/?state=in_doubt&consumer=billing&refresh=off")
	if n := br.count("table.intents tbody tr"); n != 3 {
		t.Fatalf("the filtered list shows %d rows, want the 3 billing emails", n)
	}
	br.act(`document.querySelector('#bulk a.bulk-retry').click()`)
	if n := br.count("table.bulk-items tr.outcome-would"); n != 3 || !strings.Contains(br.text("h1"), "Resend 3 of the 3 intents") {
		t.Fatalf("the preview lists %d intents to resend (%q), want the 3 billing emails", n, br.text("h1"))
	}
	if n := double.Stats().Requests; n != 0 {
		t.Fatalf("the preview sent %d emails", n)
	}
	br.act(`document.querySelector('form.bulk-confirm textarea[name=reason]').value = 'Email Activity shows none of them: SendGrid never sent them';
		document.querySelector('form.bulk-confirm input[name=actor]').value = 'alice';
		document.querySelector('form.bulk-confirm input[name=confirmed]').checked = true;
		sessionStorage.setItem('bulkForm', new URLSearchParams(new FormData(document.querySelector('form.bulk-confirm'))).toString());
		document.querySelector('form.bulk-confirm button[type=submit]').click()`)
	if got := br.text("#bulk-summary"); got != "Resend: 3 done, 0 refused, 0 errors" {
		t.Fatalf("bulk result = %q; page:\n%s", got, br.text("main"))
	}

	// The dispatcher sends each once; the list shows what the operator asked.
	testkit.Eventually(t, 30*time.Second, "the resent emails to succeed", func() bool {
		for _, id := range billing {
			if b.intentState(t, id) != intenttype.StateSucceeded {
				return false
			}
		}
		return true
	})
	br.act(`document.querySelector('#back-to-list').click()`)
	if n := br.count("table.intents tbody tr td.empty"); n != 1 {
		t.Errorf("the in_doubt billing list still shows intents:\n%s", br.text("table.intents"))
	}
	br.navigate(b.url + "/?consumer=billing&refresh=off")
	var states []string
	br.eval(`Array.from(document.querySelectorAll('table.intents tbody tr td:nth-child(2)')).map(td => td.innerText.trim())`, &states)
	if strings.Join(states, ",") != "succeeded,succeeded,succeeded" {
		t.Errorf("the billing emails on the list are %v, want all succeeded", states)
	}
	if got := br.text(".count-in_doubt .n"); got != "1" {
		t.Errorf("in_doubt tile = %q, want 1 (the newsletter's)", got)
	}
	// One in_doubt is an alarm; no failed intent is none.
	if inDoubt, failed := tileColor(br, "in_doubt"), tileColor(br, "failed"); inDoubt != tileAlarm["in_doubt"] || failed == tileAlarm["failed"] || failed == tileAlarm["in_doubt"] {
		t.Errorf("tiles: 1 in_doubt is %s, 0 failed is %s; want the in_doubt alarm colour, and no alarm for none failed", inDoubt, failed)
	}
	for _, id := range billing {
		if n := double.EffectsFor(id); n != 1 {
			t.Errorf("SendGrid got intent %d's email %d times, want once", id, n)
		}
	}
	if n := double.EffectsFor(newsletter); n != 0 || b.intentState(t, newsletter) != intenttype.StateInDoubt {
		t.Errorf("the newsletter's email, outside the filter, was sent %d times or moved", n)
	}

	postAgainInTheBrowser(t, br, b, double, billing)
}

// revealInTheBrowser reveals the newsletter email's recipient from its page: the
// page shows it, and its event log who looked and why; the next view is
// redacted again.
func revealInTheBrowser(t *testing.T, br *browser, b *testBundle, newsletter int64) {
	t.Helper()
	br.navigate(fmt.Sprintf("%s/intents/%d", b.url, newsletter))
	if got := br.text("#next-lookup"); !strings.Contains(got, "waits for an operator") {
		t.Errorf("next look-up = %q, want that it waits for an operator", got)
	}
	if payload := br.text("pre.payload"); strings.Contains(payload, recipientEmail) {
		t.Fatalf("the payload shows the recipient before any reveal:\n%s", payload)
	}
	br.act(`document.querySelector('form.reveal input[name=reason]').value = 'INC-7: look the recipient up in Email Activity';
		document.querySelector('form.reveal input[name=actor]').value = 'alice';
		document.querySelector('form.reveal button[type=submit]').click()`)
	if payload := br.text("pre.payload"); !strings.Contains(payload, recipientEmail) {
		t.Errorf("after the reveal the payload does not show the recipient:\n%s", payload)
	}
	if events := br.text("table.events"); !strings.Contains(events, "operator:dashboard:alice") || !strings.Contains(events, "revealed payload: INC-7: look the recipient up in Email Activity") {
		t.Errorf("the event log on the page does not show the reveal:\n%s", events)
	}
	br.navigate(fmt.Sprintf("%s/intents/%d", b.url, newsletter))
	if payload := br.text("pre.payload"); strings.Contains(payload, recipientEmail) {
		t.Errorf("viewed again, the payload still shows the recipient")
	}
}

// postAgainInTheBrowser posts the bulk form the browser saved (in
// sessionStorage) a second time, as a reload after a lost answer would:
// nothing more is sent, and the page says what the first post did.
func postAgainInTheBrowser(t *testing.T, br *browser, b *testBundle, double *sendgriddouble.Server, billing []int64) {
	t.Helper()
	var saved string
	br.eval(`sessionStorage.getItem('bulkForm')`, &saved)
	fields := map[string]string{}
	for _, kv := range strings.Split(saved, "&") {
		k, v, _ := strings.Cut(kv, "=")
		fields[k] = v
	}
	if fields["action_id"] == "" || fields["seen"] == "" {
		t.Fatalf("the saved form lacks its action id or seen list: %q", saved)
	}
	inputs, _ := json.Marshal(saved)
	br.act(fmt.Sprintf(`(() => {
		const f = document.createElement('form');
		f.method = 'post';
		f.action = '/bulk/retry';
		for (const [k, v] of new URLSearchParams(%s)) {
			const i = document.createElement('input');
			i.type = 'hidden'; i.name = k; i.value = v;
			f.appendChild(i);
		}
		document.body.appendChild(f);
		f.submit();
	})()`, inputs))
	if got := br.text("#bulk-summary"); got != "Resend: 3 done, 0 refused, 0 errors" || br.count("table.bulk-items tr.outcome-done") != 3 ||
		!strings.Contains(br.text("table.bulk-items"), "done already, by an earlier run of this action") {
		t.Errorf("posted again: %q\n%s", got, br.text("table.bulk-items"))
	}
	// A second resend would show at once: a new key generation.
	for _, id := range billing {
		var generation int
		if err := b.pool.QueryRow(context.Background(), `SELECT key_generation FROM outbox_intents WHERE id = $1`, id).Scan(&generation); err != nil {
			t.Fatal(err)
		}
		if st := b.intentState(t, id); st != intenttype.StateSucceeded || generation != 1 || double.EffectsFor(id) != 1 {
			t.Errorf("intent %d after the second post: %s, key generation %d, %d emails; want succeeded, 1, 1", id, st, generation, double.EffectsFor(id))
		}
	}
}

// tileAlarm is the colour of a state's count when it calls for attention.
var tileAlarm = map[string]string{"in_doubt": "rgb(181, 71, 8)", "failed": "rgb(180, 35, 24)"}

// tileColor is the computed colour of the list's count of state.
func tileColor(br *browser, state string) string {
	var color string
	br.eval(fmt.Sprintf(`getComputedStyle(document.querySelector('.count-%s .n')).color`, state), &color)
	return color
}
