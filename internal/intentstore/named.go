package intentstore

import (
	"context"
	"fmt"
	"regexp"

	"github.com/jackc/pgx/v5"
)

// namedSQL is a statement written with named parameters (@name), rewritten
// once into the positional form pgx sends. pgx.NamedArgs rewrites the text
// on every execution: for the long statements of the dispatcher's fast path
// that lexing was an eighth of the process's CPU at full load. The
// statements are constants, so the rewriting is done when the package is
// loaded and never changes.
type namedSQL struct {
	sql   string   // positional: $1, $2, ...
	names []string // names[i] is the name of $i+1
}

// candidateName finds the names a statement may use; pgx's own lexer then
// decides which are parameters (not text in a string or a comment).
var candidateName = regexp.MustCompile(`@([A-Za-z_][A-Za-z0-9_]*)`)

// mustNamed rewrites sql as pgx.NamedArgs would, and panics if it cannot
// tell which name each parameter is: a programming error in a constant.
func mustNamed(sql string) namedSQL {
	index := pgx.NamedArgs{}
	var candidates []string
	for _, m := range candidateName.FindAllStringSubmatch(sql, -1) {
		if _, ok := index[m[1]]; !ok {
			index[m[1]] = len(candidates)
			candidates = append(candidates, m[1])
		}
	}
	positional, args, err := index.RewriteQuery(context.Background(), nil, sql, nil)
	if err != nil {
		panic(fmt.Sprintf("intentstore: rewrite named parameters: %v", err))
	}
	q := namedSQL{sql: positional, names: make([]string, len(args))}
	for i, a := range args {
		n, ok := a.(int)
		if !ok {
			panic(fmt.Sprintf("intentstore: parameter $%d of a statement has no name", i+1))
		}
		q.names[i] = candidates[n]
	}
	return q
}

// queue adds q to b with a's values.
func (q namedSQL) queue(b *pgx.Batch, a pgx.NamedArgs) *pgx.QueuedQuery {
	return b.Queue(q.sql, q.args(a)...)
}

// The statements run for every intent, rewritten once.
var (
	insertMarkerQ  = mustNamed(insertMarkerSQL)
	insertMarkersQ = mustNamed(insertMarkersSQL)
	insertIntentQ  = mustNamed(insertIntentSQL)
	insertIntentsQ = mustNamed(insertIntentsSQL)
	notifyQ        = mustNamed(notifySQL)
	enqueueQ       = mustNamed(enqueueSQL)
	loadClaimQ     = mustNamed(loadClaimSQL)
	claimQ         = mustNamed(claimSQL)
	claimQueuedQ   = mustNamed(claimQueuedSQL)
	scheduleRetryQ = mustNamed(scheduleRetrySQL)
	settleQ        = mustNamed(settleSQL)
	countFinishedQ = mustNamed(countFinishedSQL)

	bumpOrderingKeysQ = mustNamed(bumpOrderingKeysSQL)
	insertOrderedQ    = mustNamed(insertOrderedSQL)
	cascadeQ          = mustNamed(cascadeSQL)
	lockReleasedKeysQ = mustNamed(lockReleasedKeysSQL)
	releaseQ          = mustNamed(releaseSQL)
)

// args orders a's values as q's parameters; a name a lacks is NULL, as with
// pgx.NamedArgs.
func (q namedSQL) args(a pgx.NamedArgs) []any {
	out := make([]any, len(q.names))
	for i, n := range q.names {
		out[i] = a[n]
	}
	return out
}
