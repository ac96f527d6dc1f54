package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox/cmd/outboxd/internal/cli"
	"github.com/outboxkit/outbox/internal/testkit/pgtest"
)

// pretty re-indents one input value as jq and json.MarshalIndent print it.
func pretty(t *testing.T, value string) string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(value), &v); err != nil {
		t.Fatal(err)
	}
	out, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func TestRecordTakesAStreamOfJSONValuesAndNamesTheBadOneAndItsLine(t *testing.T) {
	t.Parallel()
	pool, dbURL := pgtest.NewDB(t)
	env := map[string]string{"DATABASE_URL": dbURL}

	first := pretty(t, line("p-1", "billing", intent("stripe.payment_intent", "", paymentPayload)))
	bad := pretty(t, line("p-2", "billing", intent("stripe.payment_intent", "", `{"amount": -5, "currency": "usd"}`)))
	third := pretty(t, line("p-3", "billing", intent("sendgrid.email", "", emailPayload)))
	fourth := line("p-4", "billing", intent("sendgrid.email", "", emailPayload))
	// Pretty-printed values, then two on one line, then an unterminated
	// one that must not swallow the value after it.
	input := first + "\n" + bad + "\n\n" + third + fourth + " " + fourth + "\n" +
		`{"message_id": "p-5", "consumer": "billing",` + "\n" + `  "intents": [` + "\n" +
		line("p-6", "billing", intent("sendgrid.email", "", emailPayload)) + "\n"
	badLine := strings.Count(first, "\n") + 2
	thirdLine := badLine + strings.Count(bad, "\n") + 2
	fourthLine := thirdLine + strings.Count(third, "\n")
	fifthLine := fourthLine + 1

	r := outboxd(t, invocation{env: env, stdin: input, args: []string{"record"}})
	if r.code != 1 {
		t.Fatalf("record of a stream with bad values: %s; want exit 1", r)
	}
	wantContains(t, "stderr", r.stderr,
		fmt.Sprintf(`value 2 (line %d): message "p-2": the 1st intent (stripe.payment_intent): invalid stripe.payment_intent payload: field "amount"`, badLine),
		fmt.Sprintf("value 6 (line %d): incomplete JSON value: line %d starts a new value", fifthLine, fifthLine+2),
		"2 bad values")
	wantContains(t, "stdout", r.stdout, fmt.Sprintf("7 values (%d lines): 4 messages recorded with 4 intents, 1 duplicate absorbed, 2 bad values", fifthLine+2))
	if got := countRows(t, pool); fmt.Sprint(got.markers) != "[billing/p-1 billing/p-3 billing/p-4 billing/p-6]" {
		t.Errorf("markers = %v", got.markers)
	}

	r = outboxd(t, invocation{env: env, stdin: "[" + first + "]\n", args: []string{"record"}})
	if r.code != 1 {
		t.Fatalf("record of an array: %s; want exit 1", r)
	}
	wantContains(t, "stderr", r.stderr, "value 1 (line 1): a JSON array", "one after another")
}

// blockingReader gives its content, then blocks like a terminal with
// nothing typed until the test ends.
type blockingReader struct {
	content io.Reader
	done    <-chan struct{}
}

func (b *blockingReader) Read(p []byte) (int, error) {
	if n, err := b.content.Read(p); err != io.EOF {
		return n, err
	}
	<-b.done
	return 0, io.EOF
}

func TestRecordInterruptedPrintsWhatWasRecorded(t *testing.T) {
	t.Parallel()
	pool, dbURL := pgtest.NewDB(t)
	done := make(chan struct{})
	defer close(done)
	env, stdout, stderr := environment(map[string]string{"DATABASE_URL": dbURL}, "")
	env.Stdin = &blockingReader{
		// The third value is refused without the database, and its report
		// says the loop is past the first two, a full batch (--batch 2)
		// recorded before the third was taken: waiting for the second's
		// marker instead would race with the client learning of its commit.
		content: strings.NewReader(line("i-1", "billing", intent("stripe.payment_intent", "", paymentPayload)) + "\n" +
			line("i-2", "billing", intent("sendgrid.email", "", emailPayload)) + "\n[]\n"),
		done: done,
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	exit := make(chan int, 1)
	go func() { exit <- cli.Main(ctx, []string{"record", "--batch", "2"}, env) }()

	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(stderr.String(), "value 3 (line 3)") {
		if time.Now().After(deadline) {
			t.Fatalf("the third value was not reached; stderr:\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel() // Ctrl-C: the input is still open
	if code := waitExit(t, exit, "interrupted record"); code != 1 {
		t.Errorf("interrupted record exited %d, want 1", code)
	}
	wantContains(t, "stdout", stdout.String(), "3 values (3 lines): 2 messages recorded with 2 intents, 0 duplicates absorbed, 1 bad value")
	wantContains(t, "stderr", stderr.String(), "interrupted after 3 values", "2 messages before it recorded")
	if markers := len(countRows(t, pool).markers); markers != 2 {
		t.Errorf("%d messages' markers in the database, want the 2 recorded", markers)
	}
}

// TestValuesAreCutAtTheBracketThatClosesThemOutsideStrings: brackets,
// quotes and escapes inside strings do not end a value; a value may span
// lines or share one; a scalar runs to the end of its line.
func TestValuesAreCutAtTheBracketThatClosesThemOutsideStrings(t *testing.T) {
	t.Parallel()
	in := `{"a": "}]{[", "b": "say \"}\"", "c": "\\"} {"d": [1, {"e": "\\\""}]}` + "\n" +
		`  {"f":` + "\n" + `  "g\"h",` + "\n" + `  "i": ["}"]}` + "\n" +
		`42 and more` + "\n" +
		`["x", "]"]`
	want := []string{
		`1 {"a": "}]{[", "b": "say \"}\"", "c": "\\"}`,
		`1 {"d": [1, {"e": "\\\""}]}`,
		"2 {\"f\":\n  \"g\\\"h\",\n  \"i\": [\"}\"]}",
		`5 42 and more`,
		`6 ["x", "]"]`,
	}
	if got := cli.CutValues(in, 1<<20); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("values cut:\n%q\nwant:\n%q", got, want)
	}
}
