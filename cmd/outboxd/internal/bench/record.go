package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// The record scenario: a backfill through `outboxd record`, one stream of
// JSON lines (one Stripe payment intent each) read from stdin by a real
// process into a fresh database, at the default --batch against --batch 1
// (a transaction a message, what record did before batches).

// recordBatch is the batch size the record row measures: outboxd record's
// default.
const recordBatch = 100

// recordTarget is how many times the baseline's rate the row must reach.
const recordTarget = 10.0

// recordRounds alternates the two sides, each round into fresh databases,
// so that neither is favoured by a quieter moment of the machine.
const recordRounds = 2

func (r *runner) recordRows(ctx context.Context) ([]Row, error) {
	if r.cfg.Outboxd == "" {
		r.progress("record: skipped (no outboxd executable given)")
		return nil, nil
	}
	n := r.sizes.RecordValues
	lines := recordLines(n)
	r.progress("record: %d JSON lines through outboxd record, --batch %d and --batch 1, %d rounds", n, recordBatch, recordRounds)
	var batched, single time.Duration
	for range recordRounds {
		for _, side := range []struct {
			batch int
			took  *time.Duration
		}{{1, &single}, {recordBatch, &batched}} {
			d, err := r.timeRecord(ctx, lines, n, side.batch)
			if err != nil {
				return nil, err
			}
			*side.took += d
		}
	}
	values := float64(n * recordRounds)
	row := Row{
		Measure: fmt.Sprintf("outboxd record, one stream, --batch %d (default)", recordBatch), Unit: "intents/s",
		Figure: values / batched.Seconds(), Baseline: "outboxd record --batch 1 (one transaction a message), same run",
		BaselineFigure: values / single.Seconds(), Target: fmt.Sprintf("≥ %.0f× the baseline", recordTarget),
		Note: fmt.Sprintf("each side a real outboxd record process reading the same %d lines, one Stripe payment intent each, from stdin into a fresh database, %d rounds alternated; "+
			"the times include the process's start and schema check. Transactions commit one after another, in input order, as ordering requires", n, recordRounds),
	}
	row.Ratio = row.Figure / row.BaselineFigure
	row.Met = row.Ratio >= recordTarget
	return []Row{row}, nil
}

// recordLines is n values in outboxd record's JSON, one a line.
func recordLines(n int) []byte {
	var b bytes.Buffer
	for i := range n {
		fmt.Fprintf(&b, `{"message_id": "b-%d", "consumer": "backfill", "intents": [{"kind": "stripe.payment_intent", "reference": "order-%d", `+
			`"payload": {"amount": %d, "currency": "usd", "customer": "cus_%d", "payment_method": "pm_card_visa", "confirm": true, "description": "Order %d"}}]}`+"\n",
			i, i, 100+i%9900, i%50000, i)
	}
	return b.Bytes()
}

// timeRecord runs outboxd record --batch batch on lines into a fresh
// database and returns how long it took, once its summary says it
// recorded all n messages.
func (r *runner) timeRecord(ctx context.Context, lines []byte, n, batch int) (time.Duration, error) {
	db, err := r.newDatabase(ctx, "record", 2)
	if err != nil {
		return 0, err
	}
	defer r.closeDatabase(ctx, db)
	cmd := exec.CommandContext(ctx, r.cfg.Outboxd, "record", "--batch", strconv.Itoa(batch), "--json", "--database-url", db.url)
	cmd.Env = outboxdEnv()
	cmd.Stdin = bytes.NewReader(lines)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err = cmd.Run()
	took := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("outboxd record --batch %d: %w\n%s", batch, err, tail(stderr.String()))
	}
	var summary struct {
		Recorded int `json:"messages_recorded"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &summary); err != nil || summary.Recorded != n {
		return 0, fmt.Errorf("outboxd record --batch %d recorded %d of %d messages (%v): %s", batch, summary.Recorded, n, err, stdout.String())
	}
	return took, nil
}

// outboxdEnv is this process's environment for an outboxd it starts,
// without the variables that would configure it behind the flags the
// scenario gives (OUTBOXD_*) or give it credentials of its own.
func outboxdEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OUTBOXD_") && !strings.HasPrefix(kv, "STRIPE_") && !strings.HasPrefix(kv, "SENDGRID_") {
			env = append(env, kv)
		}
	}
	return env
}

// tail is the end of a process's output, enough to say why it failed.
func tail(s string) string {
	if len(s) > 4<<10 {
		return "..." + s[len(s)-4<<10:]
	}
	return s
}
