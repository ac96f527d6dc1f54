package intentstore

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
)

// The statements rewritten once send what pgx.NamedArgs would send on each
// execution: the same text and the same values in the same places.
func TestNamedSQLRewritesAsPgxDoes(t *testing.T) {
	t.Parallel()
	args := pgx.NamedArgs{"id": int64(7), "ids": []int64{1, 2}, "to": "succeeded", "job_kind": "k", "notice": "n"}
	for _, sql := range []string{
		`SELECT @id, @ids, @id, '@not_a_name', @to -- @nor_this
		WHERE x @> y AND @job_kind = @notice`,
		settleSQL, loadClaimSQL, claimSQL, countFinishedSQL, insertIntentSQL, insertIntentsSQL,
		insertMarkerSQL, insertMarkersSQL, notifySQL, enqueueSQL, bumpOrderingKeysSQL, insertOrderedSQL,
		cascadeSQL, lockReleasedKeysSQL, releaseSQL, claimQueuedSQL, scheduleRetrySQL,
	} {
		want, wantArgs, err := args.RewriteQuery(context.Background(), nil, sql, nil)
		if err != nil {
			t.Fatal(err)
		}
		q := mustNamed(sql)
		if q.sql != want || !slices.EqualFunc(q.args(args), wantArgs, func(a, b any) bool { return fmtAny(a) == fmtAny(b) }) {
			t.Errorf("mustNamed(%.60q) = %.60q %v, want %.60q %v", sql, q.sql, q.args(args), want, wantArgs)
		}
	}
}

func fmtAny(v any) string { return fmt.Sprintf("%#v", v) }
