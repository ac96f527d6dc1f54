package adminhttp_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// hostileNext are values of /login's next parameter (as the server
// decodes them) that a browser would follow off this server, or that are
// no clean local path: each must fall back to the dashboard's root.
var hostileNext = []string{
	"",
	"//evil.example",
	"///evil.example",
	"////evil.example/x",
	"/\\evil.example",
	"/\\/evil.example",
	"\\\\evil.example",
	"\\/evil.example",
	"/\t/evil.example",
	"/\n/evil.example",
	"/\r/evil.example",
	"/\r\n/evil.example",
	"/\t\\evil.example",
	"\t//evil.example",
	"\n//evil.example",
	" //evil.example",
	" /\\evil.example",
	"\x00//evil.example",
	"/\x00/evil.example",
	"/\x01/evil.example",
	"/\x0b/evil.example",
	"/\x0c/evil.example",
	"/\x1f/evil.example",
	"/\x7f/evil.example",
	"/ /evil.example",
	"/\u00a0/evil.example",
	"/\u2028/evil.example",
	"/\u3000/evil.example",
	"/\ufeff/evil.example",
	"/\uff0f/evil.example",
	"/%2F%2Fevil.example", // a path, but one that decodes to "//evil.example"
	"/%2f/evil.example",
	"/%5C/evil.example",
	"/%09/evil.example",
	"/%0a/evil.example",
	"/%E3%80%80/evil.example",
	"/intents/1\t",
	"https://evil.example/",
	"http:evil.example",
	"http:/evil.example",
	"https:\\\\evil.example",
	"javascript:alert(1)",
	"JavaScript:alert(1)",
	"data:text/html,<script>alert(1)</script>",
	"evil.example",
	"evil.example/intents",
	"intents/1",
	"./intents/1",
	"../evil.example",
	"?next=//evil.example",
	"#//evil.example",
	"@evil.example",
	"/" + strings.Repeat("a", 4096),
}

// safeNextWant maps next values that are local paths to the Location they
// give: kept as they are, or cleaned by net/http to the same path.
var safeNextWant = map[string]string{
	"/":                           "/",
	"/?state=in_doubt":            "/?state=in_doubt",
	"/intents/42":                 "/intents/42",
	"/intents/42?done=resolve":    "/intents/42?done=resolve",
	"/riverui/queues/outbox":      "/riverui/queues/outbox",
	"/?state=in_doubt&kind=a%2Fb": "/?state=in_doubt&kind=a%2Fb",
	"/@evil.example":              "/@evil.example",
	"/.//evil.example":            "/evil.example",
}

// TestLoginNextIsALocalPathOnly: /login's next parameter sends the browser
// only to a clean path on this server, both when no sign-in is needed and
// right after a real sign-in.
func TestLoginNextIsALocalPathOnly(t *testing.T) {
	t.Parallel()
	open := setup(t, setupOpts{})
	locked := setup(t, setupOpts{token: testToken})
	formHeader := map[string]string{"Content-Type": "application/x-www-form-urlencoded"}

	cases := map[string]string{}
	for _, next := range hostileNext {
		cases[next] = "/"
	}
	for next, want := range safeNextWant {
		cases[next] = want
	}
	for next, want := range cases {
		// Without a token GET /login redirects at once.
		r := open.do(t, req{path: "/login?" + url.Values{"next": {next}}.Encode()})
		if got := r.header.Get("Location"); r.status != http.StatusSeeOther || got != want {
			t.Errorf("open server: GET /login?next=%q: %d Location %q; want 303 to %q", next, r.status, got, want)
		}
		// With a token: after a real sign-in.
		form := url.Values{"token": {testToken}, "next": {next}}
		r = locked.do(t, req{method: "POST", path: "/login", body: form.Encode(), noAuth: true, header: formHeader})
		if got := r.header.Get("Location"); r.status != http.StatusSeeOther || got != want {
			t.Errorf("sign-in with next=%q: %d Location %q; want 303 to %q", next, r.status, got, want)
		}
		// The sign-in form carries only the clean value on.
		r = locked.do(t, req{path: "/login?" + url.Values{"next": {next}}.Encode(), noAuth: true})
		if want == "/" && next != "/" && next != "" && strings.Contains(r.body, "evil.example") {
			t.Errorf("GET /login?next=%q: the sign-in form carries the hostile next on", next)
		}
	}
}
