package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/outboxkit/outbox/intents/intenttype"
)

// RevealReasonPrefix starts the reason of the event Reveal appends.
const RevealReasonPrefix = intenttype.RevealReasonPrefix

// Reveal returns one intent as Get does, but with its payload unredacted
// (the recipient an operator must look up at the provider, say), after
// appending to its event log who saw it and why: an event from the
// intent's state to the same state, reason "revealed payload: <reason>",
// actor "operator:<actor>". The intent's state is not changed. The event
// is written before the payload is read, so no payload is shown without
// its event.
//
// actor and reason are required and checked as Act checks them (a
// *FieldError wrapping ErrInvalidInput); no such intent: ErrNotFound.
func (s *Store) Reveal(ctx context.Context, idOrKey, actor, reason string) (Detail, error) {
	recorded, err := validateActorReason(actor, reason, true)
	if err != nil {
		return Detail{}, err
	}
	d, err := s.Get(ctx, idOrKey)
	if err != nil {
		return Detail{}, err
	}
	if _, err := s.store.RecordReveal(ctx, d.Intent.ID, recorded, reason); err != nil {
		if errors.Is(err, ErrNotFound) {
			return Detail{}, err
		}
		return Detail{}, fmt.Errorf("audit: reveal intent %d: %w", d.Intent.ID, err)
	}
	// Read again: the event log now holds the reveal.
	if d, err = s.Get(ctx, fmt.Sprint(d.Intent.ID)); err != nil {
		return Detail{}, err
	}
	var payload []byte
	if err := s.pool.QueryRow(ctx, payloadSQL, d.Intent.ID).Scan(&payload); err != nil {
		return Detail{}, fmt.Errorf("audit: reveal intent %d: %w", d.Intent.ID, err)
	}
	d.Intent.Payload = json.RawMessage(payload)
	return d, nil
}

// validateActorReason checks an operator's actor and reason as Act does,
// and returns the actor as recorded ("operator:<actor>").
func validateActorReason(actor, reason string, reasonRequired bool) (string, error) {
	actor = strings.TrimPrefix(actor, ActorPrefix)
	switch {
	case strings.TrimSpace(actor) == "":
		return "", inputError("actor", "say who acts (e.g. a user name)")
	case len(actor) > MaxActorLength:
		return "", inputError("actor", "longer than %d bytes", MaxActorLength)
	case !printable(actor):
		return "", inputError("actor", "contains control characters or invalid UTF-8")
	}
	switch {
	case reasonRequired && strings.TrimSpace(reason) == "":
		return "", inputError("reason", "say why, for the event log")
	case len(reason) > MaxReasonLength:
		return "", inputError("reason", "longer than %d bytes (%d)", MaxReasonLength, len(reason))
	case !printable(reason):
		return "", inputError("reason", "contains control characters or invalid UTF-8")
	}
	return ActorPrefix + actor, nil
}

// payloadSQL reads an intent's payload as recorded, for Reveal.
const payloadSQL = `SELECT payload FROM outbox_intents WHERE id = $1`
