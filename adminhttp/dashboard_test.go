package adminhttp_test

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox/intents/intenttype"
)

// TestDashboardOverview checks the list's chart, choices, relative ages and
// auto-refresh, the reference page, and that no page carries a control
// character raw; every request is a read and leaves the database as it was.
func TestDashboardOverview(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{token: testToken})
	first := b.record(t, message("m-1", "billing", payment("charge", "order-1"), email("receipt", "order-1")))
	second := b.record(t, message("m-2", "billing", payment("charge", "inv/2024?x#1")))
	third := b.record(t, message("m-3", "billing", email("receipt", "order-3")))
	b.setState(t, first[0], intenttype.StateSucceeded)
	b.setState(t, first[1], intenttype.StateInDoubt)
	b.setState(t, second[0], intenttype.StateSucceeded)
	// A provider's error text may hold anything; so may a reference
	// written around the API.
	if _, err := b.pool.Exec(context.Background(), `UPDATE outbox_intents SET last_error = E'boom\x1b[31m red\x07 \u202eevil', reference = E'order-3\x01<b>' WHERE id = $1`, third[0]); err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(3*time.Minute + 30*time.Second)
	before := b.dbState(t)

	tableRows := regexp.MustCompile(`(?s)<tbody>(.*?)</tbody>`)
	rowsOf := func(body string) string {
		if m := tableRows.FindStringSubmatch(body); m != nil {
			return m[1]
		}
		return ""
	}
	for _, tc := range []struct {
		name     string
		path     string
		status   int
		location string
		wants    []string
		absent   []string
		check    func(t *testing.T, body string)
	}{
		{name: "which deployment", path: "/", status: 200, wants: []string{`id="where"`, "database " + b.pool.Config().ConnConfig.Database + " on 127.0.0.1 · namespace "}},
		{name: "list with chart, choices, ages and auto-refresh", path: "/", status: 200, wants: []string{
			`<svg class="activity"`, `<polyline class="series series-recorded" points="`, `class="series series-succeeded"`,
			`class="series series-in_doubt"`, `class="series series-backlog"`,
			`<li class="legend-recorded" title="intents recorded per minute"><span class="swatch"></span>recorded <strong class="total">4</strong>`,
			`succeeded <strong class="total">2</strong>`, `in_doubt <strong class="total">1</strong>`, `backlog <strong class="total">1</strong>`,
			`<select name="kind"><option value="">any kind</option>`, `<option value="sendgrid.email">sendgrid.email</option>`,
			`<option value="stripe.payment_intent">stripe.payment_intent</option>`, `<select name="provider">`, `<option value="stripe">stripe</option>`,
			`<meta http-equiv="refresh" content="30">`, `href="/?refresh=off" id="refresh-toggle">Pause</a>`,
			`>3 min ago</time>`, `<a class="ref" href="/references/order-1">order-1</a>`,
			`<a class="ref" href="/references/inv%2F2024%3Fx%231">inv/2024?x#1</a>`,
		}, absent: []string{`<input name="kind"`}},
		{name: "the exact time is on hover", path: "/", status: 200, check: func(t *testing.T, body string) {
			m := regexp.MustCompile(`<time datetime="([^"]+)" title="([^"]+) UTC">3 min ago</time>`).FindStringSubmatch(body)
			if m == nil {
				t.Fatalf("no age with its exact time:\n%s", rowsOf(body))
			}
			at, err := time.Parse(time.RFC3339, m[1])
			if err != nil || at.UTC().Format("2006-01-02 15:04:05") != m[2] {
				t.Errorf("datetime %q and title %q disagree", m[1], m[2])
			}
		}},
		{name: "kind choice filters", path: "/?kind=sendgrid.email", status: 200, wants: []string{
			`<option value="sendgrid.email" selected>sendgrid.email</option>`, `refresh=off`,
		}, check: func(t *testing.T, body string) {
			rows := rowsOf(body)
			if strings.Count(rows, "<tr>") != 2 || strings.Contains(rows, "stripe.payment_intent") {
				t.Errorf("kind=sendgrid.email rows:\n%s", rows)
			}
		}},
		{name: "provider choice filters", path: "/?provider=stripe", status: 200, wants: []string{`<option value="stripe" selected>stripe</option>`}, check: func(t *testing.T, body string) {
			if rows := rowsOf(body); strings.Count(rows, "<tr>") != 2 || strings.Contains(rows, "sendgrid.email") {
				t.Errorf("provider=stripe rows:\n%s", rows)
			}
		}},
		{name: "unknown kind is refused", path: "/?kind=sendgrid.mail", status: 400, wants: []string{
			`id="filter-error">unknown kind &#34;sendgrid.mail&#34; (known: `, "sendgrid.email", "No intents match",
		}, absent: []string{`http-equiv="refresh"`}},
		{name: "unknown provider is refused", path: "/?provider=stripe&provider=paypal", status: 400, wants: []string{`unknown provider &#34;paypal&#34;`, "No intents match"}},
		{name: "paused", path: "/?state=pending&refresh=off", status: 200, wants: []string{
			`Auto-refresh paused`, `href="/?state=pending" id="refresh-toggle">Resume</a>`, `<input type="hidden" name="refresh" value="off">`,
		}, absent: []string{`http-equiv="refresh"`}},
		{name: "refresh takes only off", path: "/?refresh=on", status: 400, wants: []string{`may only be &#34;off&#34;`}},
		{name: "a submitted form keeps the pause", path: "/?refresh=off&kind=&provider=&state=pending&consumer=", status: 303, location: "/?refresh=off&state=pending"},
		{name: "reference page in recorded order", path: "/references/order-1", status: 200, wants: []string{
			"<title>Reference order-1 · outboxd</title>", `<meta http-equiv="refresh" content="30">`,
			`href="/references/order-1?refresh=off" id="refresh-toggle"`,
			fmt.Sprintf(`<a href="/intents/%d">%d</a>`, first[0], first[0]), fmt.Sprintf(`<a href="/intents/%d">%d</a>`, first[1], first[1]),
			`state-succeeded`, `state-in_doubt`, `stripe.payment_intent`, `sendgrid.email`, `3 min ago`,
		}, check: func(t *testing.T, body string) {
			if a, e := strings.Index(body, fmt.Sprintf(`/intents/%d"`, first[0])), strings.Index(body, fmt.Sprintf(`/intents/%d"`, first[1])); a < 0 || e < a {
				t.Errorf("the charge (%d) is not listed before the email (%d)", first[0], first[1])
			}
			if strings.Contains(body, fmt.Sprintf(`/intents/%d"`, second[0])) {
				t.Errorf("another reference's intent is listed")
			}
		}},
		{name: "reference with a slash and a question mark", path: "/references/inv%2F2024%3Fx%231", status: 200, wants: []string{
			"<code>inv/2024?x#1</code>", fmt.Sprintf(`<a href="/intents/%d">`, second[0]),
		}},
		{name: "unknown reference", path: "/references/order-404", status: 404, wants: []string{"no intent has reference"}},
		{name: "reference with a control character", path: "/references/a%01b", status: 400, wants: []string{"malformed reference"}},
		{name: "reference page takes no filter", path: "/references/order-1?state=pending", status: 400},
		{name: "detail links to its reference", path: fmt.Sprintf("/intents/%d", first[1]), status: 200, wants: []string{
			`<a class="ref" href="/references/order-1">order-1</a>`, `3 min ago</time>`,
			`id="how-to-check"`, `intent_id`,
		}, absent: []string{`http-equiv="refresh"`}},
		{name: "confirmation forms never refresh", path: fmt.Sprintf("/intents/%d/resolve", first[1]), status: 200, absent: []string{`http-equiv="refresh"`, `id="refresh-toggle"`}},
		{name: "control characters are shown, not sent", path: fmt.Sprintf("/intents/%d", third[0]), status: 200, wants: []string{
			"boom␛[31m red␇ [U+202E]evil", "order-3␁&lt;b&gt;", `href="/references/order-3%01%3Cb%3E"`,
		}, absent: []string{"\u202e"}},
		{name: "control characters on the list", path: "/?kind=sendgrid.email", status: 200, wants: []string{"boom␛[31m red␇", "order-3␁&lt;b&gt;"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := b.do(t, req{path: tc.path})
			if r.status != tc.status {
				t.Fatalf("GET %s: %d, want %d:\n%s", tc.path, r.status, tc.status, r.body)
			}
			if tc.location != "" && r.header.Get("Location") != tc.location {
				t.Errorf("GET %s: Location %q, want %q", tc.path, r.header.Get("Location"), tc.location)
			}
			if r.status != http.StatusSeeOther {
				if ct := r.header.Get("Content-Type"); ct != "text/html; charset=utf-8" {
					t.Errorf("Content-Type %q", ct)
				}
				if csp := r.header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || strings.Contains(csp, "script-src") {
					t.Errorf("Content-Security-Policy %q", csp)
				}
				if r.header.Get("X-Frame-Options") != "DENY" || r.header.Get("Cache-Control") != "no-store" {
					t.Errorf("security headers: %v", r.header)
				}
			}
			if i := strings.IndexFunc(r.body, func(c rune) bool {
				return (c < 0x20 && c != '\n' && c != '\t' && c != '\r') || (c >= 0x7f && c < 0xa0)
			}); i >= 0 {
				t.Errorf("GET %s: a raw control character at byte %d: %q", tc.path, i, r.body[max(0, i-40):min(len(r.body), i+40)])
			}
			wantContains(t, "GET "+tc.path, r.body, tc.wants...)
			for _, a := range tc.absent {
				if strings.Contains(r.body, a) {
					t.Errorf("GET %s contains %q", tc.path, a)
				}
			}
			if tc.check != nil {
				tc.check(t, r.body)
			}
		})
	}
	if after := b.dbState(t); after != before {
		t.Errorf("reading the dashboard changed the database:\nbefore %s\nafter  %s", before, after)
	}
}

// TestDashboardChartPerMinute places intents at known minutes of the last
// hour and reads the chart's lines back into counts per minute.
func TestDashboardChartPerMinute(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{token: testToken})
	since := b.clock.Now().Truncate(time.Minute).Add(-59 * time.Minute)
	at := func(minute int) time.Time { return since.Add(time.Duration(minute)*time.Minute + 30*time.Second) }
	ids := b.record(t, message("m-1", "billing", payment("a", "r-1"), email("b", "r-1"), email("c", "r-1"), payment("d", "r-1")))
	b.setState(t, ids[0], intenttype.StateSucceeded)
	b.setState(t, ids[2], intenttype.StateInDoubt)
	b.setState(t, ids[3], intenttype.StateFailed)
	for _, p := range []struct {
		id                 int64
		created, ended     time.Time
		finished, inDoubts bool
	}{
		{ids[0], at(10), at(20), true, false},                          // succeeded after ten minutes
		{ids[1], since.Add(-2 * time.Hour), time.Time{}, false, false}, // pending since before the window
		{ids[2], at(30), at(40), false, true},                          // in doubt after ten minutes
		{ids[3], at(50), at(55), true, false},                          // failed after five
	} {
		if _, err := b.pool.Exec(context.Background(), `UPDATE outbox_intents SET created_at = $2::timestamptz,
			updated_at = CASE WHEN $3::bool THEN $4::timestamptz ELSE $2::timestamptz END, finished_at = CASE WHEN $5::bool THEN $4::timestamptz END WHERE id = $1`,
			p.id, p.created, p.inDoubts || p.finished, p.ended, p.finished); err != nil {
			t.Fatal(err)
		}
	}
	r := b.do(t, req{path: "/"})
	if r.status != http.StatusOK {
		t.Fatalf("GET /: %s", r)
	}
	wantContains(t, "the chart", r.body, `text-anchor="end">2</text>`, `text-anchor="end">1</text>`)
	got := map[string][]int{}
	for _, m := range regexp.MustCompile(`class="series series-(\w+)" points="([^"]+)"`).FindAllStringSubmatch(r.body, -1) {
		for _, pt := range strings.Fields(m[2]) {
			var x, y float64
			if _, err := fmt.Sscanf(pt, "%f,%f", &x, &y); err != nil {
				t.Fatalf("point %q: %v", pt, err)
			}
			got[m[1]] = append(got[m[1]], int((140-y)*2/130+0.5))
		}
	}
	want := map[string][]int{"recorded": make([]int, 60), "succeeded": make([]int, 60), "in_doubt": make([]int, 60), "backlog": make([]int, 60)}
	want["recorded"][10], want["recorded"][30], want["recorded"][50] = 1, 1, 1
	want["succeeded"][20] = 1
	want["in_doubt"][40] = 1
	for i := range want["backlog"] {
		want["backlog"][i] = 1 // the old pending one
		if (i >= 10 && i < 20) || (i >= 30 && i < 40) || (i >= 50 && i < 55) {
			want["backlog"][i]++
		}
	}
	for name, w := range want {
		if fmt.Sprint(got[name]) != fmt.Sprint(w) {
			t.Errorf("%s per minute:\n got %v\nwant %v", name, got[name], w)
		}
	}
	wantContains(t, "the legend", r.body, `recorded <strong class="total">3</strong>`, `backlog <strong class="total">1</strong>`)
}

// An intent's page gives an in_doubt intent its advice (what "may have
// acted" means, how to check and what to do, when it is looked up again or
// that it waits for an operator) and a succeeded one none of it, even when
// an attempt may have acted for it (issue 20: it read "never cancelled,
// only resolved" and "resolve --as succeeded").
func TestDetailAdvisesOnlyWhatApplies(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{token: testToken})
	ids := b.record(t, message("m-1", "billing", payment("charge", "order-1"), email("receipt", "order-1")))
	charge, receipt := ids[0], ids[1]
	b.setState(t, charge, intenttype.StateSucceeded)
	b.setState(t, receipt, intenttype.StateInDoubt)
	if _, err := b.pool.Exec(context.Background(), `UPDATE outbox_intents SET may_have_acted = true WHERE id = ANY($1)`, ids); err != nil {
		t.Fatal(err)
	}
	r := b.do(t, req{path: fmt.Sprintf("/intents/%d", receipt)})
	wantContains(t, "the in_doubt intent's page", r.body,
		`<dd id="may-have-acted">yes: an attempt may have reached the provider, so check there before you resolve or resend it</dd>`,
		`<dd id="next-lookup">none scheduled: it waits for an operator to resolve or resend it</dd>`,
		"Delivered or processed: resolve --as succeeded", "None found proves nothing")
	if strings.Contains(r.body, "none: retry") {
		t.Errorf("the in_doubt email's page advises a resend on nothing found")
	}
	at := b.clock.Now().Add(10*time.Minute + 30*time.Second) // "in 10 min" while the clock runs on
	if _, err := b.pool.Exec(context.Background(), `UPDATE outbox_intents SET recheck_at = $2 WHERE id = $1`, receipt, at); err != nil {
		t.Fatal(err)
	}
	r = b.do(t, req{path: fmt.Sprintf("/intents/%d", receipt)})
	wantContains(t, "the in_doubt intent's page, a look-up scheduled", r.body,
		`<dd id="next-lookup">in 10 min (`+at.UTC().Format("2006-01-02 15:04:05")+` UTC), by the dispatcher`)

	r = b.do(t, req{path: fmt.Sprintf("/intents/%d", charge)})
	if r.status != http.StatusOK {
		t.Fatalf("the succeeded intent's page: %s", r)
	}
	for _, advice := range []string{"May have acted", "only resolved", "resolve --as", "retry", "Next look-up", "cancel"} {
		if strings.Contains(strings.ToLower(r.body), strings.ToLower(advice)) {
			t.Errorf("the succeeded intent's page says %q", advice)
		}
	}
}
