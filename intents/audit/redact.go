package audit

import (
	"encoding/json"

	"github.com/outboxkit/outbox/intents/intenttype"
)

// notConfigured replaces the payload of an intent whose provider is not in
// the Store's registry: without its rule, nothing of it is safe to show.
const notConfigured = `{"redacted":"provider not configured"}`

// redact replaces in's payload with its provider's redacted copy.
func (s *Store) redact(in *intenttype.Intent) {
	if s.registry == nil {
		in.Payload = json.RawMessage(notConfigured)
		return
	}
	p, ok := s.registry.ByName(in.Provider)
	if !ok {
		in.Payload = json.RawMessage(notConfigured)
		return
	}
	in.Payload = p.Redact(in.Kind, in.Payload)
}
