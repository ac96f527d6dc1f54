package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/adminhttp"
	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/internal/ingest"
	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/internal/testkit/pgtest"
)

const (
	paymentPayload = `{"amount": 500, "currency": "usd", "customer": "cus_1", "payment_method": "pm_card_visa", "confirm": true}`
	emailPayload   = `{"from": {"email": "shop@example.com"}, "to": [{"email": "buyer@example.com"}], "subject": "Receipt", "text": "Thanks"}`
)

// line builds one input line for `outboxd record`.
func line(messageID, consumer string, intents ...string) string {
	return fmt.Sprintf(`{"message_id": %q, "consumer": %q, "intents": [%s]}`, messageID, consumer, strings.Join(intents, ", "))
}

func intent(kind, name, payload string) string {
	if name == "" {
		return fmt.Sprintf(`{"kind": %q, "payload": %s}`, kind, payload)
	}
	return fmt.Sprintf(`{"kind": %q, "name": %q, "payload": %s}`, kind, name, payload)
}

type dbCounts struct {
	markers []string // consumer/message_id
	intents []string // message_id/name
	queued  int
}

func countRows(t *testing.T, pool *pgxpool.Pool) dbCounts {
	t.Helper()
	ctx := context.Background()
	collect := func(sql string) []string {
		rows, err := pool.Query(ctx, sql)
		if err != nil {
			t.Fatal(err)
		}
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	var c dbCounts
	c.markers = collect(`SELECT consumer || '/' || message_id FROM outbox_processed_messages ORDER BY 1`)
	c.intents = collect(`SELECT coalesce(message_id, '') || '/' || name FROM outbox_intents ORDER BY 1`)
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox_intents WHERE queued`).Scan(&c.queued); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestRecordReportsBadLinesAndWritesNothingOfThem(t *testing.T) {
	t.Parallel()
	pool, dbURL := pgtest.NewDB(t)
	env := map[string]string{"DATABASE_URL": dbURL, "STRIPE_API_KEY": secretStripeKey}

	const (
		stripeKind   = "stripe.payment_intent"
		sendgridKind = "sendgrid.email"
	)
	good1 := `{"message_id": "order-1", "consumer": "billing", "intents": [{"kind": "stripe.payment_intent", "payload": ` + paymentPayload + `, "reference": "order-1"}]}`
	input := []struct {
		line string
		bad  string // what the line's error must say; "" for a good line
	}{
		/* 1 */ {good1, ""},
		/* 2 */ {line("order-2", "billing", intent(stripeKind, "payment", paymentPayload), intent(sendgridKind, "receipt", emailPayload)), ""},
		/* 3 */ {good1, ""}, // a duplicate
		/* 4 */ {`{"message_id": "order-4", "consumer": "billing", "intents": [`, "incomplete JSON value: line 5 starts a new value"},
		/* 5 */ {`{"message_id": "order-5", "consumer": "billing", "priority": 1, "intents": [` + intent(stripeKind, "", paymentPayload) + `]}`, `unknown field "priority"`},
		/* 6 */ {`{"consumer": "billing", "intents": [` + intent(stripeKind, "", paymentPayload) + `]}`, "message id is empty"},
		/* 7 */ {line("order-7", "billing", intent("fax.send", "", `{"to": "+15555550100"}`)), `"fax.send"`},
		/* 8 */ {line("order-8", "billing", intent(stripeKind, "", `{"amount": -5, "currency": "usd"}`)), `"amount"`},
		/* 9 */ {line("order-9", "billing"), `"intents" is missing or empty`},
		/* 10 */ {line("order-10", "billing", `{"kind": "sendgrid.email", "name": "receipt"}`), `message "order-10": the 1st intent (sendgrid.email "receipt"): "payload" is missing`},
		/* 11 */ {line("order-11", "billing", intent(stripeKind, "payment", paymentPayload), intent(sendgridKind, "receipt", `{"from": {"email": "shop@example.com"}, "to": [], "subject": "s", "text": "t"}`)), `message "order-11": the 2nd intent (sendgrid.email "receipt"): `},
		/* 12 */ {"", ""}, // blank lines are skipped
		/* 13 */ {`{"message_id": "order-13", "consumer": "billing", "intents": []} {"x": 1}`, `"intents" is missing or empty`}, // two values, both bad
		/* 14 */ {line("order-14", "shipping", intent(sendgridKind, "", emailPayload)), ""},
		/* 15 */ {line("order-1", "shipping", intent(sendgridKind, "", emailPayload)), ""}, // same message, another consumer
	}
	var in strings.Builder
	for _, l := range input {
		in.WriteString(l.line + "\n")
	}
	r := outboxd(t, invocation{env: env, stdin: in.String(), args: []string{"record"}})
	if r.code != 1 {
		t.Fatalf("record with bad lines: %s; want exit 1", r)
	}

	reported := map[int]string{} // by the line a value starts on
	for _, l := range strings.Split(strings.TrimSpace(r.stderr), "\n") {
		var value, n int
		if _, err := fmt.Sscanf(l, "value %d (line %d):", &value, &n); err == nil {
			reported[n] += l + "\n"
		}
	}
	wantContains(t, "line 13's reports", reported[13], "value 12 (line 13)", "value 13 (line 13)", `unknown field "x"`)
	for i, l := range input {
		n := i + 1
		switch {
		case l.bad != "":
			if got, ok := reported[n]; !ok {
				t.Errorf("line %d (%s) not reported; stderr:\n%s", n, l.line, r.stderr)
			} else if !strings.Contains(got, l.bad) {
				t.Errorf("line %d reported as %q; want it to say %s", n, got, l.bad)
			}
		default:
			if got, ok := reported[n]; ok {
				t.Errorf("good line %d reported: %s", n, got)
			}
		}
	}
	wantContains(t, "stdout", r.stdout, "15 values (15 lines): 4 messages recorded with 5 intents, 1 duplicate absorbed, 10 bad values")
	wantContains(t, "stderr", r.stderr, "10 bad values", "nothing of them was written")

	got := countRows(t, pool)
	wantMarkers := []string{"billing/order-1", "billing/order-2", "shipping/order-1", "shipping/order-14"}
	wantIntents := []string{"order-1/", "order-1/", "order-14/", "order-2/payment", "order-2/receipt"}
	if fmt.Sprint(got.markers) != fmt.Sprint(wantMarkers) {
		t.Errorf("processed markers = %v, want %v", got.markers, wantMarkers)
	}
	if fmt.Sprint(got.intents) != fmt.Sprint(wantIntents) {
		t.Errorf("intents = %v, want %v", got.intents, wantIntents)
	}
	if got.queued != len(wantIntents) {
		t.Errorf("%d intents queued for the dispatchers, want every one (%d)", got.queued, len(wantIntents))
	}
	var ref string
	if err := pool.QueryRow(context.Background(), `SELECT coalesce(reference, '') FROM outbox_intents WHERE consumer = 'billing' AND message_id = 'order-1'`).Scan(&ref); err != nil {
		t.Fatal(err)
	}
	if ref != "order-1" {
		t.Errorf("order-1's reference = %q, want order-1", ref)
	}

	// Feeding the good lines again records nothing new: every one is a
	// duplicate, and the exit code is 0.
	var goodOnly strings.Builder
	for _, l := range input {
		if l.bad == "" && l.line != "" {
			goodOnly.WriteString(l.line + "\n")
		}
	}
	r = outboxd(t, invocation{env: env, stdin: goodOnly.String(), args: []string{"record"}})
	if r.code != 0 {
		t.Fatalf("record of duplicates: %s", r)
	}
	wantContains(t, "stdout", r.stdout, "5 values (5 lines): 0 messages recorded with 0 intents, 5 duplicates absorbed, 0 bad values")
	if again := countRows(t, pool); fmt.Sprint(again) != fmt.Sprint(got) {
		t.Errorf("rows after recording duplicates = %+v, want unchanged %+v", again, got)
	}
}

func TestRecordJSONSummaryAndFile(t *testing.T) {
	t.Parallel()
	pool, dbURL := pgtest.NewDB(t)
	env := map[string]string{"DATABASE_URL": dbURL, "STRIPE_API_KEY": secretStripeKey}

	in := line("a", "billing", intent("stripe.payment_intent", "", paymentPayload)) + "\n" +
		line("a", "billing", intent("stripe.payment_intent", "", paymentPayload)) + "\n" +
		"not json\n" +
		line("b", "billing", intent("sendgrid.email", "", emailPayload)) // no final newline
	r := outboxd(t, invocation{env: env, stdin: in, args: []string{"record", "--json"}})
	if r.code != 1 {
		t.Fatalf("record --json with a bad line: %s; want exit 1", r)
	}
	var summary map[string]int
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	if err := dec.Decode(&summary); err != nil {
		t.Fatalf("stdout is not a JSON summary: %v\n%s", err, r.stdout)
	}
	if dec.More() {
		t.Fatalf("stdout has more than the summary:\n%s", r.stdout)
	}
	want := map[string]int{"values": 4, "lines": 4, "messages_recorded": 2, "intents_recorded": 2, "duplicates_absorbed": 1, "bad_values": 1}
	if fmt.Sprint(summary) != fmt.Sprint(want) {
		t.Errorf("summary = %v, want %v", summary, want)
	}
	if !regexp.MustCompile(`(?m)^value 3 \(line 3\): `).MatchString(r.stderr) {
		t.Errorf("stderr does not report line 3:\n%s", r.stderr)
	}

	// --file reads the same format from a file.
	path := filepath.Join(t.TempDir(), "messages.jsonl")
	content := line("c", "billing", intent("sendgrid.email", "", emailPayload)) + "\n" +
		line("a", "billing", intent("stripe.payment_intent", "", paymentPayload)) + "\n"
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	r = outboxd(t, invocation{env: env, stdin: "this stdin must not be read\n", args: []string{"record", "--file", path, "--json"}})
	if r.code != 0 {
		t.Fatalf("record --file: %s", r)
	}
	summary = nil
	if err := json.Unmarshal([]byte(r.stdout), &summary); err != nil {
		t.Fatalf("stdout is not a JSON summary: %v\n%s", err, r.stdout)
	}
	want = map[string]int{"values": 2, "lines": 2, "messages_recorded": 1, "intents_recorded": 1, "duplicates_absorbed": 1, "bad_values": 0}
	if fmt.Sprint(summary) != fmt.Sprint(want) {
		t.Errorf("summary = %v, want %v", summary, want)
	}
	if got := countRows(t, pool); fmt.Sprint(got.markers) != "[billing/a billing/b billing/c]" {
		t.Errorf("markers = %v", got.markers)
	}

	// So does FILE, before or after the flags, and - is stdin.
	for i, args := range [][]string{{"record", path, "--json"}, {"record", "--json", path}, {"record", "--json", "-"}} {
		stdin := "this stdin must not be read\n"
		if args[len(args)-1] == "-" {
			stdin = content
		}
		r = outboxd(t, invocation{env: env, stdin: stdin, args: args})
		summary = nil
		if err := json.Unmarshal([]byte(r.stdout), &summary); r.code != 0 || err != nil || summary["values"] != 2 || summary["duplicates_absorbed"] != 2 {
			t.Errorf("outboxd %q (run %d): %s; want both values absorbed as duplicates", args, i, r)
		}
	}

	r = outboxd(t, invocation{env: env, args: []string{"record", "--file", filepath.Join(t.TempDir(), "missing.jsonl")}})
	if r.code != 2 {
		t.Errorf("record --file with a missing file: %s; want exit 2", r)
	}
	wantContains(t, "stderr", r.stderr, "--file", "missing.jsonl")
}

func TestRecordNeedsNoCredentialsAndRefusesAnOverlongLine(t *testing.T) {
	t.Parallel()
	pool, dbURL := pgtest.NewDB(t)
	env := map[string]string{"DATABASE_URL": dbURL} // no API keys: recording only validates

	long := line("big", "billing", intent("sendgrid.email", "", fmt.Sprintf(`{"from": {"email": "shop@example.com"}, "to": [{"email": "a@example.com"}], "subject": "s", "text": %q}`, strings.Repeat("x", 5<<20))))
	in := line("ok", "billing", intent("stripe.payment_intent", "", paymentPayload)) + "\n" + long + "\n" +
		line("after", "billing", intent("stripe.payment_intent", "", paymentPayload)) + "\n"
	r := outboxd(t, invocation{env: env, stdin: in, args: []string{"record"}})
	if r.code != 1 {
		t.Fatalf("record with an overlong line: %s; want exit 1", r)
	}
	wantContains(t, "stderr", r.stderr, "line 2: longer than")
	if got := countRows(t, pool); fmt.Sprint(got.markers) != "[billing/ok]" {
		t.Errorf("markers = %v, want only the line before the overlong one", got.markers)
	}

	var buf bytes.Buffer
	buf.WriteString(line("payload-too-big", "billing", intent("sendgrid.email", "", fmt.Sprintf(`{"from": {"email": "shop@example.com"}, "to": [{"email": "a@example.com"}], "subject": "s", "text": %q}`, strings.Repeat("x", 100<<10)))))
	r = outboxd(t, invocation{env: env, stdin: buf.String(), args: []string{"record"}})
	if r.code != 1 {
		t.Fatalf("record with an oversize payload: %s; want exit 1", r)
	}
	wantContains(t, "stderr", r.stderr, "value 1 (line 1): ", "limit is")
	if got := countRows(t, pool); fmt.Sprint(got.markers) != "[billing/ok]" {
		t.Errorf("markers = %v after an oversize payload", got.markers)
	}
}

// TestRecordRefusesBadBytesAndWritesNothingOfThem feeds `record` lines
// holding each text the doors must refuse (invalid UTF-8, NUL, a lone
// surrogate escape) in a message id, a consumer, a reference and a
// payload. Each line is reported with its number, the field and the
// problem; nothing of it is written, and the good lines between them are
// recorded. Two ids that differ only in their invalid bytes are both
// refused instead of the second being absorbed as a duplicate.
func TestRecordRefusesBadBytesAndWritesNothingOfThem(t *testing.T) {
	t.Parallel()
	pool, dbURL := pgtest.NewDB(t)
	env := map[string]string{"DATABASE_URL": dbURL}
	withText := func(text string) string {
		return `{"from": {"email": "shop@example.com"}, "to": [{"email": "a@example.com"}], "subject": "s", "text": "` + text + `"}`
	}
	raw := func(id, consumer, ref, text string) string {
		return `{"message_id": "` + id + `", "consumer": "` + consumer + `", "intents": [{"kind": "sendgrid.email", "reference": "` + ref + `", "payload": ` + withText(text) + `}]}`
	}
	type inputLine struct {
		line, field, problem string // field and problem are "" for a good line
	}
	var input []inputLine
	for i, bad := range testkit.BadTexts() {
		input = append(input,
			inputLine{raw(bad.JSON, "billing", "r", "t"), "message_id", bad.Problem},
			inputLine{raw(fmt.Sprintf("good-%d", i), "billing", "r", "t"), "", ""},
			inputLine{raw("m", bad.JSON, "r", "t"), "consumer", bad.Problem},
			inputLine{raw("m", "billing", bad.JSON, "t"), "intents[0].reference", bad.Problem},
			inputLine{raw("m", "billing", "r", bad.JSON), "intents[0].payload.text", bad.Problem},
		)
	}
	// Would both be "order-\ufffd" once decoded.
	input = append(input,
		inputLine{raw("order-\xff", "billing", "r", "t"), "message_id", "invalid UTF-8"},
		inputLine{raw("order-\xfe", "billing", "r", "t"), "message_id", "invalid UTF-8"},
	)
	var in strings.Builder
	for _, l := range input {
		in.WriteString(l.line + "\n")
	}
	r := outboxd(t, invocation{env: env, stdin: in.String(), args: []string{"record"}})
	if r.code != 1 {
		t.Fatalf("record with bad bytes: %s; want exit 1", r)
	}
	reported := map[int]string{}
	for _, l := range strings.Split(r.stderr, "\n") {
		// One value per line here: value N starts on line N.
		var n, line int
		if _, err := fmt.Sscanf(l, "value %d (line %d):", &n, &line); err == nil && n == line {
			reported[n] = l
		}
	}
	var bad, good int
	var wantMarkers []string
	for i, l := range input {
		n := i + 1
		got, ok := reported[n]
		switch {
		case l.field == "":
			good++
			wantMarkers = append(wantMarkers, "billing/"+strings.Split(l.line, `"`)[3])
			if ok {
				t.Errorf("good line %d reported: %s", n, got)
			}
		case !ok:
			bad++
			t.Errorf("line %d (%q) not reported", n, l.line)
		default:
			bad++
			if !strings.Contains(got, `field "`+l.field+`"`) || !strings.Contains(got, l.problem) {
				t.Errorf("line %d reported as %q; want it to name field %q and say %s", n, got, l.field, l.problem)
			}
		}
	}
	wantContains(t, "stdout", r.stdout, fmt.Sprintf("%d values (%d lines): %d messages recorded with %d intents, 0 duplicates absorbed, %d bad values", len(input), len(input), good, good, bad))
	if !utf8.ValidString(r.stderr) {
		t.Errorf("stderr is not valid UTF-8:\n%q", r.stderr)
	}
	sort.Strings(wantMarkers)
	got := countRows(t, pool)
	if fmt.Sprint(got.markers) != fmt.Sprint(wantMarkers) || len(got.intents) != good || got.queued != good {
		t.Errorf("rows = %+v; want only the good lines' markers %v, one intent and job each", got, wantMarkers)
	}
}

// TestRecordSaysHowToEnableTheProviderOfAnUnknownKind: a kind of a provider
// --providers leaves out is refused naming the flag that enables it, and a
// mistyped kind with the built-in kind it may mean.
func TestRecordSaysHowToEnableTheProviderOfAnUnknownKind(t *testing.T) {
	t.Parallel()
	_, dbURL := pgtest.NewDB(t)
	env := map[string]string{"DATABASE_URL": dbURL}
	for _, tc := range []struct {
		args []string
		kind string
		want []string
	}{
		{nil, "webhook.post", []string{`unknown intent kind "webhook.post"`, "webhook.post is the webhook provider's, which --providers does not enable: add it (--providers stripe,sendgrid,webhook) with the endpoints as --webhook NAME=URL"}},
		{nil, "nats.publish", []string{"add it (--providers stripe,sendgrid,nats)"}},
		{[]string{"--providers", "sendgrid"}, "stripe.refund", []string{"add it (--providers sendgrid,stripe)"}},
		{nil, "stripe.paymnet_intent", []string{`did you mean "stripe.payment_intent"?`}},
		{[]string{"--providers", "sendgrid"}, "stripe.paymnet_intent", []string{`did you mean "stripe.payment_intent"? stripe.payment_intent is the stripe provider's, which --providers does not enable: add it (--providers sendgrid,stripe)`}},
	} {
		r := outboxd(t, invocation{env: env, stdin: line("m-"+tc.kind, "billing", intent(tc.kind, "", `{}`)), args: append([]string{"record"}, tc.args...)})
		if r.code != 1 {
			t.Errorf("record of a %s intent with %v: %s; want exit 1", tc.kind, tc.args, r)
		}
		wantContains(t, "record of a "+tc.kind+" intent", r.stderr, tc.want...)
	}
	r := outboxd(t, invocation{env: env, stdin: line("m-fax", "billing", intent("fax.send", "", `{}`)), args: []string{"record"}})
	if strings.Contains(r.stderr, "did you mean") || strings.Contains(r.stderr, "--providers") {
		t.Errorf("a kind no provider knows got a hint: %s", r)
	}
}

// TestRecordsHelpListsOnlyTheFlagsThatChangeWhatItDoes: recording calls no
// provider, so the flags that only configure calls (base URLs,
// reconciliation, key windows, timeouts) are not offered, and FILE is.
func TestRecordsHelpListsOnlyTheFlagsThatChangeWhatItDoes(t *testing.T) {
	t.Parallel()
	r := outboxd(t, invocation{args: []string{"record", "--help"}})
	wantContains(t, "record --help", r.stdout, "Usage: outboxd record [flags] [FILE]", "--providers", "--webhook value", "--nats-url", "--database-url", "--json", "--batch", "no API key is needed")
	for _, flag := range []string{"--stripe-api-base", "--sendgrid-api-base", "--sendgrid-reconcile", "--nats-stream", "--nats-key-window", "--webhook-idempotency-header", "--webhook-key-window", "--webhook-timeout"} {
		if strings.Contains(r.stdout, flag) {
			t.Errorf("record --help lists %s, which does nothing when recording:\n%s", flag, r.stdout)
		}
	}
}

// TestThePayloadLimitIsOneSettingTheMessageLimitsFollow: --max-payload-bytes
// (or OUTBOXD_MAX_PAYLOAD_BYTES) is the one limit: it bounds each payload,
// and a record value may take ingest.MessageBytesPerPayload times it; the
// default is the admin API's body limit the same way.
func TestThePayloadLimitIsOneSettingTheMessageLimitsFollow(t *testing.T) {
	t.Parallel()
	if got := ingest.MaxMessageBytes(intents.DefaultMaxPayloadBytes); got != adminhttp.DefaultMaxBodyBytes {
		t.Errorf("the default payload limit makes messages of %d bytes; the admin API takes %d", got, adminhttp.DefaultMaxBodyBytes)
	}
	_, dbURL := pgtest.NewDB(t)
	env := map[string]string{"DATABASE_URL": dbURL}
	email := func(id string, textBytes int) string {
		return line(id, "billing", intent("sendgrid.email", "", fmt.Sprintf(`{"from": {"email": "shop@example.com"}, "to": [{"email": "a@example.com"}], "subject": "s", "text": %q}`, strings.Repeat("x", textBytes))))
	}

	r := outboxd(t, invocation{env: env, stdin: email("big-1", 100<<10), args: []string{"record"}})
	if r.code != 1 {
		t.Errorf("record of a 100 KiB payload with the default limit: %s; want exit 1", r)
	}
	wantContains(t, "stderr", r.stderr, "payload too large", "the limit is 65536 (outboxd's --max-payload-bytes)")
	for _, in := range []invocation{
		{env: env, stdin: email("big-2", 100<<10), args: []string{"record", "--max-payload-bytes", "200000"}},
		{env: vars(env, "OUTBOXD_MAX_PAYLOAD_BYTES", "200000"), stdin: email("big-3", 100<<10), args: []string{"record"}},
	} {
		if r := outboxd(t, in); r.code != 0 || !strings.Contains(r.stdout, "1 message recorded") {
			t.Errorf("record of a 100 KiB payload with %v %v: %s; want it recorded", in.args, in.env, r)
		}
	}

	// A value may take 16 times the payload limit: with 1000, 16000 bytes.
	r = outboxd(t, invocation{env: env, stdin: email("long", 20000) + "\n", args: []string{"record", "--max-payload-bytes", "1000"}})
	if r.code != 1 {
		t.Errorf("record of a 20000-byte value with a 1000-byte payload limit: %s; want exit 1", r)
	}
	wantContains(t, "stderr", r.stderr, "line 1: longer than 16000 bytes, the most a message may take (16 times --max-payload-bytes)")

	for _, bad := range []string{"0", "-1", "33554433", "lots"} {
		r := outboxd(t, invocation{env: env, args: []string{"record", "--max-payload-bytes", bad}})
		if r.code != 2 || !strings.Contains(r.stderr, "--max-payload-bytes") {
			t.Errorf("record --max-payload-bytes %s: %s; want exit 2 naming the flag", bad, r)
		}
	}
}
