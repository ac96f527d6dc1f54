package audit

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/intents/intenttype"
)

// Get returns one intent, payload redacted, with its attempts and events,
// both oldest first, read in one snapshot. idOrKey is the intent's numeric
// id or its idempotency key; a number is tried as an id first, then as a
// key. No such intent: an error wrapping ErrNotFound. An empty idOrKey, or
// one with control characters or invalid UTF-8: a *FieldError wrapping
// ErrInvalidInput.
func (s *Store) Get(ctx context.Context, idOrKey string) (Detail, error) {
	if idOrKey == "" {
		return Detail{}, inputError("id", "give an intent's id or idempotency key")
	}
	if !printable(idOrKey) {
		// No key holds such bytes, and PostgreSQL would refuse them.
		return Detail{}, inputError("id", "contains control characters or invalid UTF-8")
	}
	var d Detail
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		in, err := findIntent(ctx, tx, idOrKey)
		if err != nil {
			return err
		}
		d.Intent = in
		rows, err := tx.Query(ctx, attemptsSQL, in.ID)
		if err != nil {
			return err
		}
		if d.Attempts, err = pgx.CollectRows(rows, scanAttempt); err != nil {
			return err
		}
		rows, err = tx.Query(ctx, eventsSQL, in.ID)
		if err != nil {
			return err
		}
		if d.Events, err = pgx.CollectRows(rows, scanEvent); err != nil {
			return err
		}
		rows, err = tx.Query(ctx, afterSQL, in.ID)
		if err != nil {
			return err
		}
		d.After, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (intenttype.Dependency, error) {
			var dep intenttype.Dependency
			err := row.Scan(&dep.AfterID, &dep.AfterKey, &dep.AfterState, &dep.Fill)
			if len(dep.Fill) == 0 {
				dep.Fill = nil
			}
			return dep, err
		})
		return err
	})
	if errors.Is(err, ErrNotFound) {
		return Detail{}, fmt.Errorf("%w: no intent has id or key %q", ErrNotFound, truncate(idOrKey, 80))
	}
	if err != nil {
		return Detail{}, fmt.Errorf("audit: get intent: %w", err)
	}
	s.redact(&d.Intent)
	d.HowToCheck = HowToCheck(d.Intent)
	return d, nil
}

func findIntent(ctx context.Context, tx pgx.Tx, idOrKey string) (intenttype.Intent, error) {
	if id, err := strconv.ParseInt(idOrKey, 10, 64); err == nil && id > 0 {
		rows, err := tx.Query(ctx, intentByIDSQL, id)
		if err != nil {
			return intenttype.Intent{}, err
		}
		in, err := pgx.CollectExactlyOneRow(rows, scanIntent)
		if err == nil || !errors.Is(err, pgx.ErrNoRows) {
			return in, err
		}
	}
	rows, err := tx.Query(ctx, intentByKeySQL, idOrKey)
	if err != nil {
		return intenttype.Intent{}, err
	}
	in, err := pgx.CollectExactlyOneRow(rows, scanIntent)
	if errors.Is(err, pgx.ErrNoRows) {
		return in, ErrNotFound
	}
	return in, err
}

func scanAttempt(row pgx.CollectableRow) (intenttype.Attempt, error) {
	var a intenttype.Attempt
	err := row.Scan(&a.ID, &a.IntentID, &a.Attempt, &a.StartedAt, &a.FinishedAt, &a.Outcome, &a.HTTPStatus,
		&a.ProviderRef, &a.Replayed, &a.Error)
	return a, err
}

func scanEvent(row pgx.CollectableRow) (intenttype.Event, error) {
	var e intenttype.Event
	err := row.Scan(&e.ID, &e.IntentID, &e.At, &e.Actor, &e.FromState, &e.ToState, &e.Reason)
	return e, err
}

const intentByIDSQL = `
SELECT ` + intentColumns + `
FROM outbox_intents
WHERE id = $1`

const intentByKeySQL = `
SELECT ` + intentColumns + `
FROM outbox_intents
WHERE idempotency_key = $1`

// afterSQL lists the intents one comes after (intents.After).
const afterSQL = `
SELECT d.after_id, a.idempotency_key, a.state, d.fill
FROM outbox_intent_dependencies d
JOIN outbox_intents a ON a.id = d.after_id
WHERE d.intent_id = $1
ORDER BY d.after_id`

// attemptsSQL reads every attempt (migration 014: the intent's row holds
// its latest, outbox_attempts the others); the latest has no id of its
// own: 0.
const attemptsSQL = `
SELECT coalesce(id, 0), intent_id, attempt, started_at, finished_at, coalesce(outcome, ''), coalesce(http_status, 0),
    coalesce(provider_ref, ''), replayed, coalesce(error, '')
FROM outbox_intent_attempts
WHERE intent_id = $1
ORDER BY attempt, id`

// eventsSQL reads every event, those stored and those the intent's row
// says (a plain intent's recording, its dispatcher's success: id 0).
const eventsSQL = `
SELECT coalesce(id, 0), intent_id, at, actor, coalesce(from_state, ''), to_state, reason
FROM outbox_intent_events
WHERE intent_id = $1
ORDER BY at, id`
