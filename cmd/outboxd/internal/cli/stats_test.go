package cli_test

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/outboxkit/outbox/intents/audit"
	"github.com/outboxkit/outbox/intents/intenttype"
)

func TestStatsCountsByStateAndKind(t *testing.T) {
	t.Parallel()
	db := newOperatorDB(t)
	db.setState(t, db.receipt, intenttype.StateInDoubt, "ambiguous")
	db.setState(t, db.payment, intenttype.StateSucceeded, "")
	if _, err := db.pool.Exec(context.Background(), `UPDATE outbox_intents SET created_at = now() - interval '2 hours' WHERE id = $1`, db.notice); err != nil {
		t.Fatal(err)
	}

	r := db.run(t, "stats")
	if r.code != 0 {
		t.Fatalf("stats: %s", r)
	}
	wantContains(t, "stats", r.stdout, "KIND", "PENDING", "IN_DOUBT", "TOTAL", "in_doubt: 1", "intents list --state in_doubt", "oldest pending: 2h0m")
	for _, row := range []string{
		`(?m)^\s*sendgrid\.email\s+0\s+1\s+0\s+0\s+0\s+1\s+0\s+2\s*$`,
		`(?m)^\s*stripe\.payment_intent\s+0\s+0\s+0\s+1\s+0\s+0\s+0\s+1\s*$`,
		`(?m)^\s*all kinds\s+0\s+1\s+0\s+1\s+0\s+1\s+0\s+3\s*$`,
	} {
		if !regexp.MustCompile(row).MatchString(r.stdout) {
			t.Errorf("stats has no row matching %s:\n%s", row, r.stdout)
		}
	}

	r = db.run(t, "stats", "--json")
	var st audit.Stats
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || r.code != 0 {
		t.Fatalf("stats --json: %v\n%s", err, r)
	}
	var age struct {
		Seconds *float64 `json:"oldest_pending_age_seconds"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &age); err != nil || age.Seconds == nil {
		t.Fatalf("stats --json has no oldest_pending_age_seconds: %v\n%s", err, r.stdout)
	}
	if st.Total != 3 || st.InDoubt != 1 || st.ByState[intenttype.StatePending] != 1 || st.ByKindState["sendgrid.email"][intenttype.StateInDoubt] != 1 ||
		*age.Seconds < 2*60*60 || *age.Seconds > 2*60*60+60 {
		t.Errorf("stats --json = %+v, age %gs", st, *age.Seconds)
	}
	if strings.Contains(r.stdout, "_ns") {
		t.Errorf("stats --json still gives nanoseconds:\n%s", r.stdout)
	}

	// Nothing pending.
	db.setState(t, db.notice, intenttype.StateCancelled, "")
	r = db.run(t, "stats")
	wantContains(t, "stats", r.stdout, "oldest pending: none")

	for _, args := range [][]string{{"stats", "extra"}, {"stats", "--jsn"}} {
		if r := db.run(t, args...); r.code != 2 {
			t.Errorf("%v: %s; want exit 2", args, r)
		}
	}
	if r := outboxd(t, invocation{env: map[string]string{"DATABASE_URL": unreachableDB}, args: []string{"stats"}}); r.code != 1 {
		t.Errorf("stats against an unreachable database: %s; want exit 1", r)
	}
}
