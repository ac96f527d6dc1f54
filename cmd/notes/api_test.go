package main

import (
	"context"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox/internal/testkit"
)

func TestCreateNoteRefusesBadInputAndWritesNothing(t *testing.T) {
	t.Parallel()
	a := startApp(t)
	valid := `{"title":"T","body":"B","author_email":"ann@example.com"}`
	cases := []struct {
		name    string
		body    string
		headers map[string]string
		status  int
		field   string
	}{
		{"missing title", `{"body":"B","author_email":"ann@example.com"}`, nil, 400, "title"},
		{"blank title", `{"title":"  ","body":"B","author_email":"ann@example.com"}`, nil, 400, "title"},
		{"title too long", `{"title":"` + strings.Repeat("t", maxTitleLength+1) + `","body":"B","author_email":"ann@example.com"}`, nil, 400, "title"},
		{"title on two lines", `{"title":"a\nb","body":"B","author_email":"ann@example.com"}`, nil, 400, "title"},
		{"title not a string", `{"title":7,"body":"B","author_email":"ann@example.com"}`, nil, 400, "title"},
		{"missing body", `{"title":"T","author_email":"ann@example.com"}`, nil, 400, "body"},
		{"body too long", `{"title":"T","body":"` + strings.Repeat("b", maxBodyLength+1) + `","author_email":"ann@example.com"}`, nil, 400, "body"},
		{"missing author_email", `{"title":"T","body":"B"}`, nil, 400, "author_email"},
		{"author_email with a name", `{"title":"T","body":"B","author_email":"Ann <ann@example.com>"}`, nil, 400, "author_email"},
		{"author_email not an address", `{"title":"T","body":"B","author_email":"ann"}`, nil, 400, "author_email"},
		{"unknown field", `{"title":"T","body":"B","author_email":"ann@example.com","tags":["x"]}`, nil, 400, "tags"},
		{"not JSON", `title=T`, nil, 400, ""},
		{"empty body", ``, nil, 400, ""},
		{"two objects", valid + valid, nil, 400, ""},
		{"Idempotency-Key too long", valid, map[string]string{headerIdempotencyKey: strings.Repeat("k", maxIdempotencyKeyLen+1)}, 400, headerIdempotencyKey},
		{"request too large", `{"title":"T","body":"` + strings.Repeat("b", maxRequestBytes) + `","author_email":"ann@example.com"}`, nil, 413, ""},
	}
	for _, c := range cases {
		var got apiError
		status, raw := call(t, a, http.MethodPost, "/notes", c.body, c.headers, &got)
		if status != c.status || got.Field != c.field || got.Error == "" {
			t.Errorf("%s: %d %s, want %d naming field %q", c.name, status, raw, c.status, c.field)
		}
		if c.field != "" && !strings.Contains(got.Error, c.field) {
			t.Errorf("%s: error %q does not name %s", c.name, got.Error, c.field)
		}
	}
	if n := testkit.Count(t, a.pool, `SELECT count(*) FROM notes`); n != 0 {
		t.Errorf("%d notes written by refused requests", n)
	}
	if n := testkit.Count(t, a.pool, `SELECT count(*) FROM outbox_intents`); n != 0 {
		t.Errorf("%d intents written by refused requests", n)
	}

	for path, want := range map[string]int{"/notes/abc": 400, "/notes/0": 400, "/notes/999": 404} {
		var got apiError
		if status, raw := call(t, a, http.MethodGet, path, "", nil, &got); status != want || got.Field != "id" {
			t.Errorf("GET %s: %d %s, want %d naming id", path, status, raw, want)
		}
	}
}

// A note made through the API is published, tagged by the tagger, and its
// author emailed once; a POST retried with its Idempotency-Key returns the
// same note, and the key reused for another note is refused.
func TestNoteIsPublishedTaggedAndEmailedOnce(t *testing.T) {
	t.Parallel()
	a := startApp(t)
	body := `{"title":"Launch","body":"The #Launch meeting is urgent.","author_email":"ann@example.com"}`
	key := map[string]string{headerIdempotencyKey: "k-1"}
	var created note
	if status, raw := call(t, a, http.MethodPost, "/notes", body, key, &created); status != http.StatusCreated {
		t.Fatalf("POST: %d %s", status, raw)
	}
	var again note
	if status, raw := call(t, a, http.MethodPost, "/notes", body, key, &again); status != http.StatusOK || again.ID != created.ID {
		t.Fatalf("retried POST: %d %s, want 200 with note %d", status, raw, created.ID)
	}
	var refused apiError
	other := strings.Replace(body, "Launch", "Other", 1)
	if status, raw := call(t, a, http.MethodPost, "/notes", other, key, &refused); status != http.StatusUnprocessableEntity || refused.Field != headerIdempotencyKey {
		t.Fatalf("key reused for another note: %d %s, want 422 naming %s", status, raw, headerIdempotencyKey)
	}
	var plain note
	if status, raw := call(t, a, http.MethodPost, "/notes", `{"title":"No key","body":"just text","author_email":"bob@example.com"}`, nil, &plain); status != http.StatusCreated || plain.ID == created.ID {
		t.Fatalf("POST without a key: %d %s", status, raw)
	}

	var got note
	testkit.Eventually(t, 30*time.Second, "both notes tagged", func() bool {
		call(t, a, http.MethodGet, "/notes/"+itoa(plain.ID), "", nil, &got)
		if got.TaggedAt == nil {
			return false
		}
		call(t, a, http.MethodGet, "/notes/"+itoa(created.ID), "", nil, &got)
		return got.TaggedAt != nil
	})
	if want := []string{"launch", "meeting", "urgent"}; !reflect.DeepEqual(got.Tags, want) {
		t.Errorf("tags %v, want %v", got.Tags, want)
	}
	if err := a.double.WaitForEmails(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
	var subject string
	for _, e := range a.double.Emails() {
		if e.CustomArgs["note_id"] == itoa(created.ID) {
			subject = e.Subject
		}
	}
	if subject != "Your note was tagged: #launch, #meeting, #urgent" {
		t.Errorf("email subject %q", subject)
	}
	if n := testkit.Count(t, a.pool, `SELECT count(*) FROM notes`); n != 2 {
		t.Errorf("%d notes, want 2", n)
	}
	if n := testkit.Count(t, a.pool, `SELECT count(*) FROM outbox_intents WHERE idempotency_key = $1`, messageID(created.ID)); n != 1 {
		t.Errorf("%d NoteCreated intents for note %d, want 1", n, created.ID)
	}
	if n, d := len(a.double.Emails()), a.double.DuplicateEffects(); n != 2 || d != 0 {
		t.Errorf("%d emails at the double (%d duplicates), want 2 and 0", n, d)
	}
}

func TestDeriveTags(t *testing.T) {
	t.Parallel()
	cases := map[string][]string{
		"":                                    {},
		"plain text":                          {},
		"#Go and #go and #rust-lang":          {"go", "rust-lang"},
		"Meeting tomorrow, ASAP":              {"meeting", "urgent"},
		"#café ideas: a bug":                  {"bug", "café", "idea"},
		"#" + strings.Repeat("é", 30):         {strings.Repeat("é", 20)},
		"#a #b #c #d #e #f #g #h #i #j #k #l": {"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"},
	}
	for text, want := range cases {
		if got := deriveTags(text); !reflect.DeepEqual(got, want) {
			t.Errorf("deriveTags(%q) = %v, want %v", text, got, want)
		}
	}
}

func TestParseArgs(t *testing.T) {
	t.Parallel()
	bad := map[string][]string{
		"--notes must be between": {"--notes", "2"},
		"--timeout must be":       {"--timeout", "-1s"},
		"--keep-database applies": {"--keep-database", "--database-url", "postgres://x/y"},
		"--log-level must be":     {"--log-level", "loud"},
		"--log-format must be":    {"--log-format", "xml"},
		"unexpected argument":     {"extra"},
	}
	for want, args := range bad {
		_, err := parseArgs(args, testEnv, io.Discard)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parseArgs(%q) = %v, want an error containing %q", args, err, want)
		}
	}
	halfSendGrid := func(name string) string {
		if name == "SENDGRID_API_KEY" {
			return "SG.secret"
		}
		return ""
	}
	if _, err := parseArgs(nil, halfSendGrid, io.Discard); err == nil || strings.Contains(err.Error(), "SG.secret") {
		t.Errorf("SENDGRID_API_KEY without SENDGRID_API_BASE: %v", err)
	}

	o, err := parseArgs(nil, testEnv, io.Discard)
	if err != nil || !o.scenario || o.serve || o.addr != "127.0.0.1:0" || o.notes != defaultNotes {
		t.Errorf("no flags: %+v, %v; want the scenario on an ephemeral port", o, err)
	}
	o, err = parseArgs([]string{"--serve"}, testEnv, io.Discard)
	if err != nil || o.scenario || o.addr != defaultAddr {
		t.Errorf("--serve: %+v, %v; want serving on %s without the scenario", o, err, defaultAddr)
	}
	if code := run(context.Background(), []string{"--help"}, testEnv, io.Discard, io.Discard); code != 0 {
		t.Errorf("--help exit code %d, want 0", code)
	}
	stderr := &testkit.SyncBuffer{}
	if code := run(context.Background(), []string{"--notes", "1"}, testEnv, io.Discard, stderr); code != 2 || !strings.Contains(stderr.String(), "--notes") {
		t.Errorf("bad flag: exit code %d, stderr %q; want 2 naming --notes", code, stderr)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
