package intentstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxkit/outbox/intents/intenttype"
)

// ClaimParams asks for a claim on an intent as the caller saw it.
type ClaimParams struct {
	// Row is the intent as loaded: its state (pending, or dispatching for a
	// take-over), attempt count and key generation guard the claim.
	Row Row
	// ProviderKey is the key to send if the intent has none yet for its
	// generation (intenttype.ProviderKey), with the Namespace it embeds.
	ProviderKey string
	Namespace   string
	// Now is the claim's time: the attempt's start, and the key window's
	// start for the first claim of a key generation.
	Now time.Time
}

// Claim is an attempt that holds an intent.
type Claim struct {
	// Attempt is the attempt's number, counted over the intent's life.
	Attempt int
	// ProviderKey and Namespace are what the provider must be sent.
	ProviderKey string
	Namespace   string
	// KeyFirstUsedAt is when the key's first attempt was claimed.
	KeyFirstUsedAt time.Time
}

// ErrClaimLost is returned by Claim when the intent is no longer as the
// caller saw it (another worker claimed it, an operator acted): the caller
// must not call the provider.
var ErrClaimLost = errors.New("intent changed before it could be claimed")

// takeOverError is recorded on an attempt found open when a new claim takes
// the intent over.
const takeOverError = TakeOverPrefix + " the dispatcher stopped during the call, or its settlement was lost"

// TakeOverPrefix starts the error of every attempt closed for want of an
// outcome (a take-over by a claim or by the dispatcher's own decision): a
// late outcome of that attempt replaces it (see settleSQL).
const TakeOverPrefix = "no outcome recorded:"

// Claim moves a pending intent to dispatching under a new attempt, or takes
// over a dispatching intent whose attempt was never settled (closing that
// attempt as ambiguous and recording that the provider may have acted), in
// one statement committed before the provider is called. Returns
// ErrClaimLost when the intent moved meanwhile.
//
// Claims made at the same time (the workers of one fetch) share a
// transaction, each under its own guard: Claim returns only once that
// transaction has committed, so the call it allows always follows a
// committed claim. A group that fails for a reason other than a transient
// error is retried one claim at a time; a transient error is returned (the
// job runs again and finds the intent as the commit left it).
func (s *Store) Claim(ctx context.Context, p ClaimParams) (Claim, error) {
	from := p.Row.State
	if from != intenttype.StatePending && from != intenttype.StateDispatching {
		return Claim{}, fmt.Errorf("intentstore: cannot claim intent %d from %s", p.Row.ID, from)
	}
	if err := ctx.Err(); err != nil {
		return Claim{}, fmt.Errorf("intentstore: claim intent %d: %w", p.Row.ID, err)
	}
	return s.claims.do(context.WithoutCancel(ctx), p)
}

// durableClaimSQL makes the commit of the claim's transaction wait for the
// synchronous standbys (synchronous_standby_names) where the session would
// not: the write-ahead claim is what keeps a provider without an
// idempotency key from being called twice, and a claim that a failover
// loses is a call the promoted standby knows nothing of (DESIGN.md,
// invariant 16). Only the claim: recording and settling commit as the
// database is set, so a deployment can run synchronous_commit = local and
// pay the standby's round trip once per claimed batch. It only ever raises
// the level (remote_apply stays), and without a synchronous standby "on"
// is a local flush, which synchronous_commit = off would skip.
const durableClaimSQL = `
SELECT set_config('synchronous_commit', 'on', true)
WHERE current_setting('synchronous_commit') IN ('off', 'local', 'remote_write')`

// claimBatch is a batch for claims: its statements share one implicit
// transaction (one Sync), whose commit durableClaimSQL makes wait.
func claimBatch() *pgx.Batch {
	b := &pgx.Batch{}
	b.Queue(durableClaimSQL)
	return b
}

// maxClaimGroup bounds the claims committed in one transaction.
const maxClaimGroup = 128

// claimGroup commits a group of claims in one transaction, in intent id
// order (see settleGroup); if it fails for a reason other than a transient
// error, each claim is tried alone.
func (s *Store) claimGroup(ctx context.Context, group []*call[ClaimParams, Claim]) {
	runOrdered(ctx, group, "claim", func(p ClaimParams) int64 { return p.Row.ID }, s.claimAlone,
		func(ctx context.Context, sorted []*call[ClaimParams, Claim]) error {
			b := claimBatch()
			results := make([]*claimResult, len(sorted))
			for i, cl := range sorted {
				results[i] = queueClaim(b, cl.req)
			}
			if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
				for i, cl := range sorted {
					cl.err = results[i].lost(err)
				}
				return err
			}
			// Only now has the transaction committed.
			for i, cl := range sorted {
				cl.res, cl.err = results[i].claim()
			}
			return nil
		})
}

func (s *Store) claimAlone(ctx context.Context, p ClaimParams) (Claim, error) {
	b := claimBatch()
	res := queueClaim(b, p)
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return Claim{}, res.lost(fmt.Errorf("intentstore: claim intent %d: %w", p.Row.ID, err))
	}
	return res.claim()
}

// claimResult receives what one claim's statement returns.
type claimResult struct {
	c     Claim
	found bool
	token int64
}

func (r *claimResult) claim() (Claim, error) {
	if !r.found {
		return Claim{}, ErrClaimLost
	}
	return r.c, nil
}

// lost is the error of a claim whose statement failed: it may have
// committed, its answer lost, so it carries the claim's token.
func (r *claimResult) lost(err error) error { return &ClaimLostError{Token: r.token, Err: err} }

// queueClaim queues one claim into b.
func queueClaim(b *pgx.Batch, p ClaimParams) *claimResult {
	res := &claimResult{token: rand.Int64()}
	from := p.Row.State
	claimQ.queue(b, pgx.NamedArgs{
		"id":              p.Row.ID,
		"from":            from,
		"seen_attempts":   p.Row.AttemptCount,
		"seen_generation": p.Row.KeyGeneration,
		"provider_key":    p.ProviderKey,
		"namespace":       p.Namespace,
		"now":             p.Now,
		"token":           res.token,
		"take_over":       from == intenttype.StateDispatching,
		"take_over_error": takeOverError,
	}).QueryRow(func(row pgx.Row) error {
		err := row.Scan(&res.c.Attempt, &res.c.ProviderKey, &res.c.Namespace, &res.c.KeyFirstUsedAt)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		res.found = err == nil
		return err
	})
	return res
}

// ReleaseUnsent undoes a claim that may have committed but whose answer
// was lost (the connection dropped after the commit): the caller knows it
// did not call the provider, so each attempt the claim opened is closed as
// not called (outcome retry) and its intent goes back to pending, "may have
// acted" and queued as they were, instead of being taken over later as an
// attempt that stopped during its call (DESIGN.md, invariant 15). The
// claim is known by the token its error carries (ClaimLostError); ids are
// the intents it may have claimed, or nil when the caller cannot know
// (a batch of ClaimQueued: every claim is searched). It reports how many
// it released (none: the claim had not committed, or was already settled)
// and retries transient errors for Config.RetryFor or until ctx ends, so
// it says so once the database is back. An error that carries no token,
// or proves the claim was never sent, releases nothing.
func (s *Store) ReleaseUnsent(ctx context.Context, ids []int64, claimErr error, why string) (int, error) {
	token, ok := claimToken(claimErr)
	if !ok || neverSent(claimErr) {
		return 0, nil
	}
	var n int
	err := s.retryTransient(ctx, func(ctx context.Context) error {
		sql := releaseUnsentByIDSQL
		if ids == nil {
			sql = releaseUnsentQueuedSQL
		}
		return s.pool.QueryRow(ctx, sql, pgx.NamedArgs{
			"ids": ids, "token": token, "finished_at": s.now(), "error": storable(why, maxTextBytes),
		}).Scan(&n)
	})
	if err != nil {
		return 0, fmt.Errorf("intentstore: release the unsent claim %x: %w", token, err)
	}
	return n, nil
}

// claimSQL is the claim every provider call happens under: one statement,
// so one implicit transaction and one round trip, committed before the call.
// It moves the intent from the state and attempt count the worker saw to
// dispatching, records which attempt holds it, fixes the key the provider is
// sent (the first claim of a key generation derives it, and starts the key's
// window), and opens the attempt in the intent's row, the one before it
// moved to outbox_attempts. Taking over an attempt found open after a crash
// (from dispatching) closes that attempt as ambiguous and makes "may have
// acted" durable. No row: the intent moved meanwhile.
var claimSQL = `
WITH claimed AS (
    UPDATE outbox_intents
    SET state = 'dispatching',
        attempt_count = attempt_count + 1,
        claimed_attempt = attempt_count + 1,
        provider_key = coalesce(provider_key, @provider_key),
        key_namespace = CASE WHEN provider_key IS NULL THEN @namespace ELSE key_namespace END,
        key_first_used_at = coalesce(key_first_used_at, @now),
        may_have_acted = may_have_acted OR @take_over,
        ` + openAttempt + `,
        claim_token = @token,
        updated_at = now()
    WHERE id = @id AND state = @from::text AND attempt_count = @seen_attempts AND key_generation = @seen_generation
    RETURNING id, attempt_count, provider_key, coalesce(key_namespace, '') AS key_namespace, key_first_used_at
),
` + archiveLatestCTE(`SELECT id FROM claimed`, `@take_over`) + `,
closed AS (
    UPDATE outbox_attempts
    SET finished_at = @now, outcome = 'ambiguous', error = @take_over_error
    WHERE @take_over AND intent_id = @id AND outcome IS NULL AND EXISTS (SELECT 1 FROM claimed)
)
SELECT attempt_count, provider_key, key_namespace, key_first_used_at FROM claimed`

// openAttempt is the SET of a claim's new attempt in the intent's row,
// started at @now (the attempt before it is moved out: archiveLatestCTE).
const openAttempt = `attempt_started_at = @now,
        attempt_finished_at = NULL, attempt_outcome = NULL, attempt_http_status = NULL,
        attempt_provider_ref = NULL, attempt_replayed = false, attempt_error = NULL`

// archiveLatestCTE is "archived": for the intents ids selects (a claim's),
// the attempt the intent's row held before the claim (the statement's
// snapshot shows it), moved to outbox_attempts; when takeOver (an SQL
// boolean) holds and the attempt is open, closed as ambiguous at @now
// (@take_over_error) for want of an outcome. An attempt already there (one
// recorded before migration 014, or closed by a take-over's settlement)
// stays as it is; closed handles an open one of those.
func archiveLatestCTE(ids, takeOver string) string {
	open := `(i.attempt_outcome IS NULL AND ` + takeOver + `)`
	return `archived AS (
    INSERT INTO outbox_attempts (intent_id, attempt, started_at, finished_at, outcome, http_status, provider_ref, replayed, error)
    SELECT i.id, i.attempt_count, i.attempt_started_at,
        CASE WHEN ` + open + ` THEN @now ELSE i.attempt_finished_at END,
        CASE WHEN ` + open + ` THEN 'ambiguous' ELSE i.attempt_outcome END,
        i.attempt_http_status, i.attempt_provider_ref, i.attempt_replayed,
        CASE WHEN ` + open + ` THEN @take_over_error ELSE i.attempt_error END
    FROM outbox_intents i
    WHERE i.id = ANY(ARRAY(` + ids + `)) AND i.attempt_count > 0 AND i.attempt_started_at IS NOT NULL
    ON CONFLICT (intent_id, attempt) DO NOTHING
)`
}

// neverSent reports whether err proves its statement never reached the
// server: pgconn's own word for it, or no connection at all.
func neverSent(err error) bool {
	var connect *pgconn.ConnectError
	return pgconn.SafeToRetry(err) || errors.As(err, &connect)
}

// releaseUnsentSQL moves back to pending every intent the claim @token
// holds among those held selects, as a retry under the same key does (no
// event; the attempt and last_error say why), and closes, as not called,
// the attempt it opened (in the intent's row, or in outbox_attempts for a
// claim made before migration 014). Safe to repeat: once released, nothing
// matches.
func releaseUnsentSQL(held string) string {
	return `
WITH released AS (
    UPDATE outbox_intents i
    SET state = 'pending', claimed_attempt = NULL, claim_token = NULL, last_error = @error, updated_at = now(),
        attempt_finished_at = @finished_at, attempt_outcome = 'retry', attempt_error = @error
    WHERE i.id = ANY(ARRAY(` + held + `)) AND i.state = 'dispatching' AND i.claim_token = @token
    RETURNING i.id, i.attempt_count
),
closed AS (
    UPDATE outbox_attempts a
    SET finished_at = @finished_at, outcome = 'retry', error = @error
    FROM released r
    WHERE a.intent_id = r.id AND a.attempt = r.attempt_count AND a.outcome IS NULL
)
SELECT count(*) FROM released`
}

var (
	// releaseUnsentByIDSQL releases among the intents of @ids.
	releaseUnsentByIDSQL = releaseUnsentSQL(`SELECT unnest(@ids::bigint[])`)
	// releaseUnsentQueuedSQL releases among every claim (a batch whose
	// intents the claimer never learnt; the sweep may have handed them to
	// River meanwhile): the unfinished intents, read only after a lost
	// answer.
	releaseUnsentQueuedSQL = releaseUnsentSQL(`
            SELECT id FROM outbox_intents
            WHERE finished_at IS NULL AND state = 'dispatching' AND claim_token = @token`)
)
