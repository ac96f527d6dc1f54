// Package intentstore owns the intent's rows and its state machine: every
// statement that changes the outbox's tables (processed markers, intents,
// attempts, events) or the River rows they touch is here, and every change
// of an intent's state goes through it, decided in Go: the dispatcher's,
// the operators' and ordering's moves (waiting to pending or cancelled,
// order.go) are checked against intenttype.Transitions. Recording
// (package intents), dispatching (package dispatcher) and operating
// (package audit) call it; none of them writes those tables itself. It
// plays the part River's riverdriver plays for river_job.
//
// Each statement is beside the Go that queues it (the tables are created
// by migrations/001 to 013). Parameters are named (pgx.NamedArgs); the
// statements run for every intent are rewritten into positional form once
// (named.go).
//
// The guards it keeps (DESIGN.md, "Invariants at the edges"):
//
//   - every provider call happens under a claim (ClaimQueued, LoadClaim,
//     Claim): a conditional update that records which attempt holds the
//     intent, committed before the call;
//   - an unfinished intent belongs to the dispatchers' queue (queued) or to
//     River's dispatch job, never both (queue.go);
//   - a settlement applies only to the attempt that holds the claim, or to
//     the state, attempt count and key generation a decision was made from;
//     a late or stale one is recorded as an attempt and changes nothing;
//   - "may have acted" only ever turns on, except when a proven absence
//     moves the intent to a new key generation;
//   - one attempt counter, in the intent's row, with the budget's start:
//     River's job attempt counter is never read;
//   - operator actions lock the row, refuse an intent whose attempt is in
//     flight, and refuse to cancel one that may have acted.
package intentstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sethvargo/go-retry"

	"github.com/outboxkit/outbox/intents/intenttype"
)

// Store writes the outbox's tables. It is safe for concurrent use.
type Store struct {
	pool   *pgxpool.Pool
	job    dispatchJob
	notify *notifyLimiter
	// retryFor bounds how long a write meeting transient errors is sent
	// again (Config.RetryFor).
	retryFor time.Duration
	now      func() time.Time
	// Loads, claims and settlements made at the same time share a
	// statement or a transaction (see combiner).
	loadClaims *combiner[loadClaimReq, Loaded]
	claims     *combiner[ClaimParams, Claim]
	settles    *combiner[Settlement, Settled]
}

// Config configures a Store. A nil *Config takes every default.
type Config struct {
	// NotifyCooldown spaces out the notifications recording sends to wake
	// dispatchers (see QueueInsert). Defaults to 0: one with every insert.
	NotifyCooldown time.Duration
	// Now is the clock for NotifyCooldown and the attempts the store
	// closes itself. Defaults to time.Now.
	Now func() time.Time
	// RetryFor bounds how long a settlement or an operator action that
	// meets transient database errors (a lost connection, a failover) is
	// sent again before it fails. Defaults to DefaultRetryFor.
	RetryFor time.Duration
}

// DefaultRetryFor is Config.RetryFor's default: long enough to ride out a
// primary's failover or restart, so that an outcome the provider
// confirmed does not become in_doubt because the database was away.
const DefaultRetryFor = 15 * time.Minute

// New returns a Store on the database behind pool.
func New(pool *pgxpool.Pool, config *Config) (*Store, error) {
	if pool == nil {
		return nil, errors.New("intentstore: pool is required")
	}
	job, err := newDispatchJob()
	if err != nil {
		return nil, err
	}
	var cfg Config
	if config != nil {
		cfg = *config
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.RetryFor <= 0 {
		cfg.RetryFor = DefaultRetryFor
	}
	s := &Store{pool: pool, job: job, notify: &notifyLimiter{cooldown: cfg.NotifyCooldown, now: cfg.Now}, retryFor: cfg.RetryFor, now: cfg.Now}
	s.loadClaims = newCombiner(maxLoadClaimGroup, groupLanes, s.loadClaimGroup)
	s.claims = newCombiner(maxClaimGroup, groupLanes, s.claimGroup)
	s.settles = newCombiner(maxSettleGroup, groupLanes, s.settleGroup)
	return s, nil
}

// Namespace reads the deployment's namespace (migration 003).
func (s *Store) Namespace(ctx context.Context) (string, error) {
	var ns string
	if err := s.pool.QueryRow(ctx, namespaceSQL).Scan(&ns); err != nil {
		return "", fmt.Errorf("intentstore: read namespace: %w", err)
	}
	return ns, nil
}

// Row is what a dispatcher needs to know about an intent to decide its next
// step. The fields that guard a transition (State, AttemptCount,
// KeyGeneration, ClaimedAttempt) are passed back with the decision.
type Row struct {
	ID             int64
	Key            string
	Kind           string
	Provider       string
	Payload        []byte
	State          intenttype.State
	AttemptCount   int
	BudgetFrom     int
	MayHaveActed   bool
	ClaimedAttempt int
	ProviderKey    string
	Namespace      string
	KeyGeneration  int
	KeyFirstUsedAt time.Time
	RecheckCount   int
	CreatedAt      time.Time
	// TraceParent and TraceState are the W3C trace context the intent was
	// recorded under; empty when it was not traced.
	TraceParent string
	TraceState  string
	// LastAttemptAt is when the latest attempt was claimed; zero if none.
	LastAttemptAt time.Time
	// Queued says the dispatchers' queue holds the intent (migration
	// 013): it claims it while pending, its claimer holds it while
	// dispatching. A River dispatch job works only intents that are not
	// queued.
	Queued bool
	// OrderingKey is the stream it was recorded in; empty: none.
	OrderingKey string
	// HasDependents says an intent was recorded after it (migration 012).
	// Together with OrderingKey it says whether finishing it must release
	// or cancel what waits (Settlement.releases).
	HasDependents bool
}

// AttemptsUsed is how many attempts the current budget has used.
func (r *Row) AttemptsUsed() int { return r.AttemptCount - r.BudgetFrom }

func scanRow(row pgx.CollectableRow) (Row, error) {
	return scanRowWith(row)
}

// scanRowWith reads intentColumns into a Row, then the columns a statement
// selects after them into more.
func scanRowWith(row pgx.Row, more ...any) (Row, error) {
	var r Row
	var claimed *int
	var firstUsed, lastAttempt *time.Time
	err := row.Scan(append([]any{&r.ID, &r.Key, &r.Kind, &r.Provider, &r.Payload, &r.State, &r.AttemptCount, &r.BudgetFrom,
		&r.MayHaveActed, &claimed, &r.ProviderKey, &r.Namespace, &r.KeyGeneration, &firstUsed, &r.RecheckCount, &r.CreatedAt,
		&r.TraceParent, &r.TraceState, &lastAttempt, &r.OrderingKey, &r.HasDependents, &r.Queued}, more...)...)
	if lastAttempt != nil {
		r.LastAttemptAt = *lastAttempt
	}
	if claimed != nil {
		r.ClaimedAttempt = *claimed
	}
	if firstUsed != nil {
		r.KeyFirstUsedAt = *firstUsed
	}
	return r, err
}

// Load reads an intent; pgx.ErrNoRows when there is none (pruned, or never
// committed).
func (s *Store) Load(ctx context.Context, id int64) (Row, error) {
	rows, err := s.pool.Query(ctx, loadSQL, pgx.NamedArgs{"id": id})
	if err != nil {
		return Row{}, err
	}
	return pgx.CollectExactlyOneRow(rows, scanRow)
}

// groupLanes is how many groups of claims and of settlements may be in
// flight at once (see combiner).
const groupLanes = 2

// retryTransient runs fn until it succeeds, fails for good, ctx ends or
// Config.RetryFor has passed, with backoff: a settlement that meets a lost
// connection or a terminated backend is sent again, so a known outcome is
// not discarded (DESIGN.md, invariant 7). Every statement fn sends must be
// safe to repeat.
func (s *Store) retryTransient(ctx context.Context, fn func(context.Context) error) error {
	backoff := retry.WithMaxDuration(s.retryFor, retry.WithCappedDuration(2*time.Second,
		retry.WithJitterPercent(20, retry.NewExponential(20*time.Millisecond))))
	return retry.Do(ctx, backoff, func(ctx context.Context) error {
		err := fn(ctx)
		if err != nil && IsTransient(ctx, err) {
			return retry.RetryableError(err)
		}
		return err
	})
}

const namespaceSQL = `SELECT namespace FROM outbox_namespace`

// intentColumns is what loadSQL reads, in the order scanRow reads.
const intentColumns = `id, idempotency_key, kind, provider, payload, state, attempt_count, budget_from,
    may_have_acted, claimed_attempt, coalesce(provider_key, ''), coalesce(key_namespace, ''), key_generation,
    key_first_used_at, recheck_count, created_at, coalesce(trace_parent, ''), coalesce(trace_state, ''),
    attempt_started_at, coalesce(ordering_key, ''), has_dependents, queued`

const loadSQL = `SELECT ` + intentColumns + ` FROM outbox_intents WHERE id = @id`
