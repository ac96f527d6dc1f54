package cli_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox/cmd/outboxd/internal/cli"
	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/internal/testkit/pgtest"
)

// TestRecordRefusesABadValueAloneInItsBatch: the values go in one batch
// (the default, 100); a value refused in the batch's transaction is
// reported with its number and line as one recorded alone would be, and
// the rest of the batch is recorded; the same message twice in the batch
// is recorded once and absorbed once.
func TestRecordRefusesABadValueAloneInItsBatch(t *testing.T) {
	t.Parallel()
	pool, dbURL := pgtest.NewDB(t)
	first := pretty(t, line("b-1", "billing", intent("stripe.payment_intent", "payment", paymentPayload), intent("sendgrid.email", "receipt", emailPayload)))
	input := first + "\n\n" +
		line("b-2", "billing", intent("sendgrid.email", "", emailPayload)) + "\n" +
		line("b-3", "billing", intent("stripe.payment_intent", "", `{"amount": -5, "currency": "usd"}`)) + "\n" +
		"not json\n" +
		line("b-2", "billing", intent("sendgrid.email", "", emailPayload)) + "\n" +
		line("b-6", "billing", intent("sendgrid.email", "", emailPayload)) + "\n"
	badLine := strings.Count(first, "\n") + 4 // the pretty value, a blank line, b-2

	r := outboxd(t, invocation{env: map[string]string{"DATABASE_URL": dbURL}, stdin: input, args: []string{"record"}})
	if r.code != 1 {
		t.Fatalf("record of a batch with bad values: %s; want exit 1", r)
	}
	wantContains(t, "stderr", r.stderr,
		fmt.Sprintf(`value 3 (line %d): message "b-3": the 1st intent (stripe.payment_intent): invalid stripe.payment_intent payload: field "amount"`, badLine),
		fmt.Sprintf("value 4 (line %d): ", badLine+1), "2 bad values")
	wantContains(t, "stdout", r.stdout, fmt.Sprintf("6 values (%d lines): 3 messages recorded with 4 intents, 1 duplicate absorbed, 2 bad values", badLine+3))
	got := countRows(t, pool)
	if fmt.Sprint(got.markers) != "[billing/b-1 billing/b-2 billing/b-6]" || fmt.Sprint(got.intents) != "[b-1/payment b-1/receipt b-2/ b-6/]" {
		t.Errorf("rows = %+v; want b-1's two intents, b-2's and b-6's", got)
	}
}

// TestRecordRefusesABatchSizeOutOfRange: --batch (or OUTBOXD_BATCH) takes
// 1 to 10,000, and its error names the flag and the range.
func TestRecordRefusesABatchSizeOutOfRange(t *testing.T) {
	t.Parallel()
	_, dbURL := pgtest.NewDB(t)
	env := map[string]string{"DATABASE_URL": dbURL}
	for _, in := range []invocation{
		{env: env, args: []string{"record", "--batch", "0"}},
		{env: env, args: []string{"record", "--batch", "-1"}},
		{env: env, args: []string{"record", "--batch", "10001"}},
		{env: vars(env, "OUTBOXD_BATCH", "0"), args: []string{"record"}},
	} {
		r := outboxd(t, in)
		if r.code != 2 || !strings.Contains(r.stderr, "--batch must be between 1 and 10000") {
			t.Errorf("outboxd %v with %v: %s; want exit 2 naming --batch and its range", in.args, in.env, r)
		}
	}
	r := outboxd(t, invocation{env: env, stdin: line("one", "billing", intent("sendgrid.email", "", emailPayload)), args: []string{"record", "--batch", "10000"}})
	if r.code != 0 || !strings.Contains(r.stdout, "1 message recorded") {
		t.Errorf("record --batch 10000: %s", r)
	}
}

// TestRecordRecordsAValueThatIsNotFollowedPromptly: a value on a pipe
// that stays open is recorded once no other value follows for a moment,
// not when the batch fills or the input ends.
func TestRecordRecordsAValueThatIsNotFollowedPromptly(t *testing.T) {
	t.Parallel()
	pool, dbURL := pgtest.NewDB(t)
	env, stdout, stderr := environment(map[string]string{"DATABASE_URL": dbURL}, "")
	reader, writer := io.Pipe()
	env.Stdin = reader
	exit := make(chan int, 1)
	go func() { exit <- cli.Main(context.Background(), []string{"record"}, env) }()
	if _, err := io.WriteString(writer, line("slow-1", "billing", intent("sendgrid.email", "", emailPayload))+"\n"); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, "the value to be recorded while the input is open", func() bool {
		return len(countRows(t, pool).markers) == 1 || len(exit) > 0
	})
	writer.Close()
	if code := waitExit(t, exit, "record with its input closed"); code != 0 || !strings.Contains(stdout.String(), "1 value (1 line): 1 message recorded") {
		t.Errorf("record: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
}

// TestRecordInterruptedWhileCommittingSaysWhichValuesMayBeRecorded: a
// batch whose transaction waits (here on a marker another transaction
// holds) when the command is interrupted may or may not have been
// recorded: the error names its values and lines, and what was recorded
// before it.
func TestRecordInterruptedWhileCommittingSaysWhichValuesMayBeRecorded(t *testing.T) {
	t.Parallel()
	pool, dbURL := pgtest.NewDB(t)
	ctx := context.Background()
	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(ctx)
	if _, err := holder.Exec(ctx, `INSERT INTO outbox_processed_messages (consumer, message_id) VALUES ('billing', 'w-4')`); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	defer close(done)
	env, stdout, stderr := environment(map[string]string{"DATABASE_URL": dbURL}, "")
	var in strings.Builder
	for i := 1; i <= 4; i++ {
		in.WriteString(line(fmt.Sprint("w-", i), "billing", intent("sendgrid.email", "", emailPayload)) + "\n")
	}
	env.Stdin = &blockingReader{content: strings.NewReader(in.String()), done: done}
	cmdCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	exit := make(chan int, 1)
	go func() { exit <- cli.Main(cmdCtx, []string{"record", "--batch", "2"}, env) }()

	// The second batch's markers wait for the holder's w-4.
	testkit.Eventually(t, 30*time.Second, "the second batch to wait on the held marker", func() bool {
		var waiting int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting)
		return err == nil && waiting > 0 || len(exit) > 0
	})
	cancel()
	if code := waitExit(t, exit, "interrupted record"); code != 1 {
		t.Errorf("interrupted record exited %d, want 1", code)
	}
	wantContains(t, "stderr", stderr.String(), "interrupted while recording values 3-4 (lines 3-4), which may or may not have been recorded; 2 messages before them recorded", "feeding the input again is safe")
	wantContains(t, "stdout", stdout.String(), "4 values (4 lines): 2 messages recorded")
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if got := countRows(t, pool); fmt.Sprint(got.markers) != "[billing/w-1 billing/w-2]" {
		t.Errorf("markers = %v, want the first batch's", got.markers)
	}
}

// TestRecordShowsProgressEveryThousandValues: a line on stderr every
// 1000 values, once the values before it are recorded (batches of 100).
func TestRecordShowsProgressEveryThousandValues(t *testing.T) {
	t.Parallel()
	_, dbURL := pgtest.NewDB(t)
	var in strings.Builder
	for i := 1; i <= 2500; i++ {
		if i == 1500 {
			in.WriteString("not json\n")
			continue
		}
		in.WriteString(line(fmt.Sprint("p-", i), "billing", intent("sendgrid.email", "", emailPayload)) + "\n")
	}
	r := outboxd(t, invocation{env: map[string]string{"DATABASE_URL": dbURL}, stdin: in.String(), args: []string{"record"}})
	if r.code != 1 {
		t.Fatalf("record: %s; want exit 1 for the bad value", r)
	}
	var progress []string
	for _, l := range strings.Split(r.stderr, "\n") {
		if strings.HasPrefix(l, "... ") {
			progress = append(progress, l)
		}
	}
	if len(progress) != 2 || progress[0] != "... 1000 values read, 1000 recorded, 0 duplicates, 0 bad" || !strings.HasPrefix(progress[1], "... 20") {
		t.Errorf("progress lines %q; want one at 1000 values and one past 2000", progress)
	}
	wantContains(t, "stdout", r.stdout, "2500 values (2500 lines): 2499 messages recorded with 2499 intents, 0 duplicates absorbed, 1 bad value")
}
