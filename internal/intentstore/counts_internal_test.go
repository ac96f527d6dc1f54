package intentstore

import (
	"context"
	"testing"

	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/internal/pgtest"
)

// The counting statements test "finished" as a state in finishedSQL; the
// list must be exactly the terminal states, or an intent would be counted
// twice or never.
func TestFinishedSQLListsTheTerminalStates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pgtest.NewDB(t)
	for _, st := range intenttype.States {
		var in bool
		if err := pool.QueryRow(ctx, `SELECT $1::text IN `+finishedSQL, string(st)).Scan(&in); err != nil {
			t.Fatal(err)
		}
		if in != st.Terminal() {
			t.Errorf("state %s: in finishedSQL %v, terminal %v", st, in, st.Terminal())
		}
	}
}
