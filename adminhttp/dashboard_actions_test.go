package adminhttp_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/outboxkit/outbox/intents/intenttype"
)

// A recipient's name with a bidi override, which the reveal must show as a
// symbol: it would otherwise reorder what the operator reads.
const bidiName = "Eve \u202eevil"

// formPost posts a dashboard form with the session cookie.
func (b *testBundle) formPost(t *testing.T, session *http.Cookie, path string, form url.Values, revealOK bool) response {
	t.Helper()
	return b.do(t, req{method: "POST", path: path, body: form.Encode(), noAuth: true, cookies: []*http.Cookie{session}, header: formHeader, revealOK: revealOK})
}

// TestDashboardRevealIsExplicitAuditedAndSafe: the intent page's payload
// is redacted; revealing it takes a POST with the CSRF token and a reason,
// writes who and why to the event log, changes nothing else, and shows
// the payload with its control and bidi characters as symbols. The next
// plain view is redacted again.
func TestDashboardRevealIsExplicitAuditedAndSafe(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{token: testToken})
	payload := strings.Replace(emailPayload, `"email": "`+recipientEmail+`"`, `"email": "`+recipientEmail+`", "name": "`+bidiName+`"`, 1)
	id := b.record(t, message("m-reveal", "billing", fmt.Sprintf(`{"kind": "sendgrid.email", "name": "receipt", "reference": "order-7", "payload": %s}`, payload)))[0]
	b.setState(t, id, intenttype.StateInDoubt)
	session := b.signIn(t, testToken)
	page := b.do(t, req{path: fmt.Sprintf("/intents/%d", id), noAuth: true, cookies: []*http.Cookie{session}})
	wantContains(t, "the intent page", page.body, fmt.Sprintf(`<form method="post" action="/intents/%d/reveal" class="reveal">`, id), "Payload <span class=\"muted\">(redacted)</span>")
	csrf := scrapeCSRF(t, page.body)
	path := fmt.Sprintf("/intents/%d/reveal", id)
	before := b.dbState(t)

	// Refused: without the CSRF token, without a reason, by GET.
	if r := b.formPost(t, session, path, url.Values{"reason": {"ticket 881"}}, false); r.status != http.StatusForbidden {
		t.Errorf("reveal without the CSRF token: %s; want 403", r)
	}
	r := b.formPost(t, session, path, url.Values{"csrf": {csrf}, "reason": {"  "}, "actor": {"alice"}}, false)
	if r.status != http.StatusBadRequest {
		t.Errorf("reveal without a reason: %d; want 400", r.status)
	}
	wantContains(t, "reveal without a reason", r.body, `id="reveal-error">Why you need the payload whole: say why, for the event log.`, `name="actor" value="alice"`)
	if r := b.do(t, req{path: path, noAuth: true, cookies: []*http.Cookie{session}}); r.status != http.StatusNotFound {
		t.Errorf("GET %s: %d; want 404 (a link never reveals)", path, r.status)
	}
	if after := b.dbState(t); after != before {
		t.Errorf("refused reveals changed the database:\n%s\n->\n%s", before, after)
	}

	r = b.formPost(t, session, path, url.Values{"csrf": {csrf}, "reason": {"ticket 881: look the recipient up"}, "actor": {"alice"}}, true)
	if r.status != http.StatusOK {
		t.Fatalf("reveal: %s", r)
	}
	wantContains(t, "the revealed page", r.body, recipientEmail, "Eve [U+202E]evil", `id="revealed"`,
		"<td>operator:dashboard:alice</td>", "revealed payload: ticket 881: look the recipient up")
	if strings.Contains(r.body, "\u202e") || strings.Contains(r.body, `action="`+path+`"`) {
		t.Errorf("the revealed page carries the raw bidi override, or the reveal form again")
	}
	var events int
	if err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox_events WHERE intent_id = $1 AND actor = 'operator:dashboard:alice' AND from_state = 'in_doubt' AND to_state = 'in_doubt' AND reason = 'revealed payload: ticket 881: look the recipient up'`, id).Scan(&events); err != nil || events != 1 {
		t.Errorf("reveal events = %d (%v), want 1", events, err)
	}
	if st := b.intentState(t, id); st != intenttype.StateInDoubt {
		t.Errorf("after a reveal the intent is %s", st)
	}
	// Viewed again, redacted again (b.do fails on the recipient's address).
	b.do(t, req{path: fmt.Sprintf("/intents/%d", id), noAuth: true, cookies: []*http.Cookie{session}})
}

// TestDashboardListOffersTheBulkActionsItsStatesAllow: the filtered list
// links to the preview of each bulk action its states allow (and none
// without a state, or when it lists nothing); a preview of a request that
// makes no sense is refused.
func TestDashboardListOffersTheBulkActionsItsStatesAllow(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{token: testToken})
	ids := b.record(t, message("m-1", "billing", email("receipt", "order-1"), email("notice", "order-1")))
	b.setState(t, ids[0], intenttype.StateInDoubt) // ids[1] stays pending
	session := b.signIn(t, testToken)
	get := func(path string) response {
		t.Helper()
		return b.do(t, req{path: path, noAuth: true, cookies: []*http.Cookie{session}})
	}
	// The list offers what its states allow, and nothing without a state.
	wantContains(t, "the in_doubt emails' list", get("/?state=in_doubt&kind=sendgrid.email").body, `id="bulk"`,
		`href="/bulk/retry?kind=sendgrid.email&amp;state=in_doubt"`, `href="/bulk/resolve?as=succeeded&amp;kind=sendgrid.email&amp;state=in_doubt"`,
		`href="/bulk/resolve?as=failed&amp;kind=sendgrid.email&amp;state=in_doubt"`)
	if body := get("/?state=in_doubt").body; strings.Contains(body, "/bulk/cancel") {
		t.Errorf("the in_doubt list offers a bulk cancel")
	}
	if body := get("/?state=pending").body; !strings.Contains(body, `href="/bulk/cancel?state=pending"`) || strings.Contains(body, "/bulk/retry") {
		t.Errorf("the pending list does not offer a bulk cancel alone")
	}
	if body := get("/").body; strings.Contains(body, `id="bulk"`) {
		t.Errorf("the list without a state offers bulk actions")
	}
	if body := get("/?state=waiting").body; strings.Contains(body, `id="bulk"`) {
		t.Errorf("an empty list offers bulk actions")
	}
	for path, want := range map[string]int{"/bulk/retry?kind=sendgrid.email": 400, "/bulk/frobnicate?state=in_doubt": 404, "/bulk/retry?state=in_doubt&as=failed": 400, "/bulk/retry?state=done": 400} {
		if r := get(path); r.status != want {
			t.Errorf("GET %s: %d; want %d", path, r.status, want)
		}
	}

}

var seenField = regexp.MustCompile(`name="seen" value="([^"]*)"`)
var actionIDField = regexp.MustCompile(`name="action_id" value="([^"]*)"`)

// TestDashboardBulkPreviewConfirmOnce: the list offers the bulk actions
// its states allow; a bulk action is previewed, and its confirmation acts
// only on the intents the preview showed, each only at the version shown
// (one that changed, left the filter or came after is refused), and once
// however often the form is posted.
func TestDashboardBulkPreviewConfirmOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, setupOpts{token: testToken})
	var emails []int64
	for i := range 5 {
		id := b.record(t, message(fmt.Sprintf("m-%d", i), "billing", email("receipt", fmt.Sprintf("order-%d", i))))[0]
		emails = append(emails, id)
		if i < 4 {
			b.setState(t, id, intenttype.StateInDoubt)
		}
	}
	charge := b.record(t, message("m-charge", "billing", payment("charge", "order-0")))[0]
	b.setState(t, charge, intenttype.StateInDoubt)
	session := b.signIn(t, testToken)

	// The preview: four in_doubt emails, none changed yet.
	form := b.previewForm(t, session, "/bulk/retry?kind=sendgrid.email&state=in_doubt", 4)
	form.Set("reason", "SendGrid's activity shows none of them")
	form.Set("actor", "alice")

	// Meanwhile: one is resolved through the API, one is resent and comes
	// back in_doubt at a new version, one more goes in_doubt.
	if r := b.do(t, req{method: "POST", path: fmt.Sprintf("/api/v1/intents/%d/resolve", emails[2]), body: `{"as": "succeeded", "reason": "found it"}`}); r.status != http.StatusOK {
		t.Fatal(r)
	}
	if _, err := b.pool.Exec(ctx, `UPDATE outbox_intents SET key_generation = key_generation + 1 WHERE id = $1`, emails[3]); err != nil {
		t.Fatal(err)
	}
	b.setState(t, emails[4], intenttype.StateInDoubt)

	// An incomplete form changes nothing and shows the same preview again.
	before := b.dbState(t)
	incomplete := b.formPost(t, session, "/bulk/retry", form, false)
	wantContains(t, "an unconfirmed form", incomplete.body, `id="form-error">Tick the confirmation box first.`, `value="`+form.Get("action_id")+`"`, `value="`+form.Get("seen")+`"`)
	if incomplete.status != http.StatusBadRequest || b.dbState(t) != before {
		t.Errorf("an unconfirmed form: %d, or it changed the database", incomplete.status)
	}
	form.Set("confirmed", "yes")
	noCSRF := cloneForm(form)
	noCSRF.Del("csrf")
	if r := b.formPost(t, session, "/bulk/retry", noCSRF, false); r.status != http.StatusForbidden || b.dbState(t) != before {
		t.Errorf("a form without the CSRF token: %d; want 403, nothing changed", r.status)
	}

	done := b.formPost(t, session, "/bulk/retry", form, false)
	if done.status != http.StatusOK {
		t.Fatalf("confirmed: %s", done)
	}
	wantContains(t, "the result", done.body, `id="bulk-summary">Resend: 2 done, 3 refused, 0 errors`,
		"it no longer matches the filter: it is succeeded now", "it changed since it was seen", "not among the intents seen")
	want := "[pending/g1 pending/g1 succeeded/g0 in_doubt/g1 in_doubt/g0]"
	if got := fmt.Sprint(b.generations(t, emails)); got != want {
		t.Errorf("after the bulk resend: %s; want %s", got, want)
	}
	if st := b.intentState(t, charge); st != intenttype.StateInDoubt {
		t.Errorf("the charge, outside the filter, is %s", st)
	}

	// Posted again (a double click, a reload after a lost answer): nothing
	// is resent twice, and the page says what the first post did.
	before = b.dbState(t)
	again := b.formPost(t, session, "/bulk/retry", form, false)
	wantContains(t, "the form posted again", again.body, `id="bulk-summary">Resend: 2 done, 3 refused`, "done already, by an earlier run of this action")
	if got := fmt.Sprint(b.generations(t, emails)); got != want || b.dbState(t) != before {
		t.Errorf("posted again: %s, or the database changed; want %s, unchanged", got, want)
	}
}

// cloneForm copies a form.
func cloneForm(v url.Values) url.Values {
	out := url.Values{}
	for k, vs := range v {
		out[k] = append([]string(nil), vs...)
	}
	return out
}

// generations is each intent's state and key generation ("pending/g1"): a
// resend moves it to pending under a new generation.
func (b *testBundle) generations(t *testing.T, ids []int64) []string {
	t.Helper()
	var out []string
	for _, id := range ids {
		var state string
		var gen int
		if err := b.pool.QueryRow(context.Background(), `SELECT state, key_generation FROM outbox_intents WHERE id = $1`, id).Scan(&state, &gen); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%s/g%d", state, gen))
	}
	return out
}

// previewForm opens a bulk action's preview at path, checks that it lists
// want intents it would change and changes nothing, and returns its
// confirmation form's fields.
func (b *testBundle) previewForm(t *testing.T, session *http.Cookie, path string, want int) url.Values {
	t.Helper()
	before := b.dbState(t)
	preview := b.do(t, req{path: path, noAuth: true, cookies: []*http.Cookie{session}})
	if preview.status != http.StatusOK || strings.Count(preview.body, `class="outcome-would"`) != want {
		t.Fatalf("preview: %s", preview)
	}
	if after := b.dbState(t); after != before {
		t.Errorf("the preview changed the database")
	}
	_, filter, _ := strings.Cut(path, "?")
	form := url.Values{"csrf": {scrapeCSRF(t, preview.body)}, "filter": {filter},
		"seen": {seenField.FindStringSubmatch(preview.body)[1]}, "action_id": {actionIDField.FindStringSubmatch(preview.body)[1]}}
	if n := len(strings.Fields(form.Get("seen"))); n != want {
		t.Fatalf("the form's seen holds %d intents, want %d: %q", n, want, form.Get("seen"))
	}
	return form
}
